"""A document planned once per text, run without graphql-core's executor on every call.

A program's `graphql()` sends the same few documents again and again (a call tree sends one a thousand
times); a full execution of each (building an executor, collecting fields, wrapping every resolver in
strawberry's machinery) cost several times the SELECT it runs. A plan is that work done once: the
operation's fields, each with its definition, its resolver and how its value completes. Running it
calls the same resolvers (strawberry's own, so arguments convert and `info` arrives as in a full
execution), under the same context, chain and transaction: nothing about a result or a decision is
kept between calls.

A plan covers the documents the ledger's clients and programs send: a query or mutation of fields,
aliases and `__typename`. Anything else (fragments, directives, introspection, abstract types, async
resolvers, field extensions) has no plan and runs as a full execution, and so do variables that fail
to coerce (nothing has run yet then). What runs follows the GraphQL spec exactly as graphql-core does
(tests/test_graphql_plans.py runs documents both ways and compares, errors included): a resolver's
error is located at its field, a null propagates to the nearest nullable field, mutation fields run in
document order.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from graphql import (
    FieldNode, GraphQLError, GraphQLInputObjectType, GraphQLList, GraphQLNonNull, GraphQLObjectType,
    GraphQLResolveInfo, GraphQLScalarType, GraphQLSchema, ListValueNode, ObjectValueNode, VariableNode,
    OperationDefinitionNode, OperationType, get_operation_ast, is_abstract_type, is_input_object_type, is_leaf_type,
    is_list_type, is_non_null_type, is_object_type, is_required_input_field, located_error,
)
from graphql.execution.executor import invalid_return_type_error
from graphql.execution.get_variable_signature import get_variable_signature
from graphql.execution.values import (
    VariableValues, VariableValueSource, get_argument_values, get_variable_values, input_is_nested_too_deeply,
)
from graphql.pyutils import Path, Undefined, inspect, is_iterable
from graphql.utilities.coerce_input_value import coerce_default_value, coerce_input_literal, coerce_input_value
from strawberry.relay.types import GlobalID
from strawberry.schema.types.base_scalars import UUIDDefinition
from strawberry.types import Info
from strawberry.types.base import StrawberryList, StrawberryMaybe, StrawberryOptional

from ..values import uuid_of_int
from .plan_inputs import input_builder

_DEFINITION = "strawberry-definition"  # strawberry's back-reference from a GraphQL field to its own field
# The metadata key (`strawberry.field(metadata={NAMESPACE: True})`) of a field whose resolver takes only its
# source and returns a fresh instance of a type that holds no state (schema.py's `financial`, `actions`,
# ...): any instance answers the same, so a plan resolves such a field once and shares its value.
NAMESPACE = "ledger-namespace"


@dataclass(frozen=True)
class _Field:
    key: str  # the response key: the alias, or the field's name
    node: FieldNode
    nodes: list  # [node]: what an error is located at and `info.field_nodes`
    name: str
    definition: Any  # the GraphQLField; None for __typename
    takes_arguments: bool
    selection: tuple["_Field", ...] | None  # the sub-selection of an object (or list of objects) value
    # How the value is resolved: strawberry's own resolver wrapper (`definition.resolve`), or, for a field
    # whose arguments are all scalars, a direct call that does what the wrapper would (see _direct).
    resolve: Any = None
    # For a field read from its source's attribute, without arguments, whose type is a scalar or an enum
    # (non-null or not): that type. Such a field is answered without an info or a path when its value
    # completes plainly (`_Run.field`); anything else (an error, a null) takes the general path.
    leaf: Any = None
    # For a field each of whose arguments is given as a variable or as a literal input object of variables
    # and constants: ((argument's out name, the variable's name or the `_LiteralObject`, whether the argument
    # is non-null), ...), read from the coerced variables as `get_argument_values` would (`_arguments`);
    # None: `get_argument_values` itself.
    arguments: tuple[tuple[str, Any, bool], ...] | None = None
    # The resolver never reads its info (an attribute, or a resolver without an info parameter called
    # directly): the info is built only if completing the value needs it (`_Run.field`).
    blind: bool = False
    # For a field whose type is an object type (non-null or not) with no `is_type_of`: that type. A value
    # that is neither null nor an error completes as its sub-selection, which is all `complete` does then.
    object_type: Any = None
    # The field's response path when no list is above it (then it is the same on every run, and paths are
    # immutable); None beneath a list, whose items' indexes make the path per run.
    path: Path | None = None
    # For a namespace field (`NAMESPACE`) with a fixed path: a one-item list holding its value once a run
    # resolved it ([None] until then), which later runs complete without calling the resolver.
    namespace: list | None = None


@dataclass(frozen=True)
class Plan:
    operation: OperationDefinitionNode
    root_type: GraphQLObjectType
    fields: tuple[_Field, ...]
    serially: bool
    # When no variable has a default: ((name, its signature, its scalar or enum type or None for any other,
    # whether it is non-null, how a value of that scalar or enum coerces), ...), coerced by `_variables` as
    # graphql-core's `get_variable_values` coerces them; None: that function itself.
    variables: tuple[tuple[str, Any, Any, bool, Any], ...] | None = None


_NO_ARGUMENTS: dict = {}


class _Unplannable(Exception):
    pass


def _named(type_: Any) -> Any:
    while isinstance(type_, (GraphQLNonNull, GraphQLList)):
        type_ = type_.of_type
    return type_


_BENEATH_A_LIST = object()  # `_selection`'s parent path for a selection under a list: no fixed paths there


def _selection(schema: GraphQLSchema, parent: GraphQLObjectType, selection_set: Any,
               parent_path: Any = None) -> tuple[_Field, ...]:
    fields: list[_Field] = []
    keys: set[str] = set()
    for node in selection_set.selections:
        if not isinstance(node, FieldNode) or node.directives:
            raise _Unplannable()  # fragments and @skip/@include: the full execution collects those
        key = node.alias.value if node.alias else node.name.value
        if key in keys:
            raise _Unplannable()  # a merged field: the full execution merges
        keys.add(key)
        name = node.name.value
        path = None if parent_path is _BENEATH_A_LIST else Path(parent_path, key, parent.name)
        if name == "__typename":
            fields.append(_Field(key, node, [node], name, None, False, None, path=path))
            continue
        if name.startswith("__"):
            raise _Unplannable()  # introspection
        definition = parent.fields[name]
        strawberry_field = (definition.extensions or {}).get(_DEFINITION)
        if strawberry_field is None or strawberry_field.is_async or strawberry_field.extensions:
            raise _Unplannable()
        named = _named(definition.type)
        if is_abstract_type(named):
            raise _Unplannable()
        sub = None
        if is_object_type(named):
            sub = _selection(schema, named, node.selection_set,
                             _BENEATH_A_LIST if path is None or _holds_a_list(definition.type) else path)
        takes_arguments = bool(definition.args or node.arguments)
        leaf_type = definition.type.of_type if is_non_null_type(definition.type) else definition.type
        leaf = leaf_type if (strawberry_field.base_resolver is None and not takes_arguments
                             and is_leaf_type(leaf_type)) else None
        direct = _direct(definition, strawberry_field, schema)
        resolver = strawberry_field.base_resolver
        blind = direct is not None and (resolver is None or resolver.info_parameter is None)
        object_type = leaf_type if is_object_type(leaf_type) and leaf_type.is_type_of is None else None
        namespace = ([None] if strawberry_field.metadata.get(NAMESPACE) and blind and not takes_arguments
                     and object_type is not None and path is not None else None)
        fields.append(_Field(key, node, [node], name, definition, takes_arguments, sub,
                             direct or _wrapped(definition), leaf,
                             _variable_arguments(definition, node) if takes_arguments else None,
                             blind, object_type, path, namespace))
    return tuple(fields)


def _holds_a_list(type_: Any) -> bool:
    while isinstance(type_, (GraphQLNonNull, GraphQLList)):
        if isinstance(type_, GraphQLList):
            return True
        type_ = type_.of_type
    return False


def _variable_arguments(definition: Any, node: FieldNode) -> tuple[tuple[str, Any, bool], ...] | None:
    """How `_arguments` reads the field's arguments, when each one the field defines is given as a variable
    or as a literal input object `_LiteralObject` takes, and none is given that it does not define; None
    otherwise (defaults, other literals: `get_argument_values`)."""
    given = {argument.name.value: argument.value for argument in node.arguments or ()}
    if set(given) - set(definition.args):
        return None
    arguments = []
    for name, argument in definition.args.items():
        value = given.get(name)
        if isinstance(value, VariableNode):
            source = value.name.value
        elif isinstance(value, ObjectValueNode):
            source = _literal_object(argument.type, value)
            if source is None:
                return None
        else:
            return None
        arguments.append((getattr(argument, "out_name", None) or name, source, is_non_null_type(argument.type)))
    return tuple(arguments)


@dataclass(frozen=True)
class _LiteralObject:
    """An argument given as a literal input object (`input: {fromAccountId: $from, amount: 2}`), each field
    it gives a variable or a constant scalar or enum value, of a type that is not @oneOf: how
    `_coerce_literal_object` coerces it."""

    type: GraphQLInputObjectType
    # Per field of the type, in the type's order: (out name; the variable's name, or `_CONSTANT`, or None
    # when the literal leaves the field out; the constant's coerced value; whether the field is required;
    # whether its type is non-null; the GraphQLInputField, whose default an omitted field takes).
    fields: tuple[tuple[str, Any, Any, bool, bool, Any], ...]


_CONSTANT = object()
# A constant is coerced once, when the plan is made: kept only when no resolver could change the value.
_IMMUTABLE = frozenset({str, int, float, bool, type(None), uuid.UUID})


def _literal_object(type_: Any, node: ObjectValueNode) -> _LiteralObject | None:
    """The `_LiteralObject` of a literal input object given for an argument of `type_`; None when it is
    not one (a nested list or object in it, a @oneOf type, a constant that does not coerce)."""
    named = type_.of_type if is_non_null_type(type_) else type_
    if not is_input_object_type(named) or named.is_one_of:
        return None
    given = {field.name.value: field.value for field in node.fields}
    if len(given) != len(node.fields) or set(given) - set(named.fields):
        return None
    fields = []
    for name, field in named.fields.items():
        value, constant = given.get(name), None
        if isinstance(value, VariableNode):
            source = value.name.value
        elif value is None:
            source = None
        elif isinstance(value, (ListValueNode, ObjectValueNode)):
            return None
        else:
            source, constant = _CONSTANT, coerce_input_literal(value, field.type)
            if constant is Undefined or type(constant) not in _IMMUTABLE:
                return None
        fields.append((field.out_name or name, source, constant, is_required_input_field(field),
                       is_non_null_type(field.type), field))
    return _LiteralObject(named, tuple(fields))


def _plain_variables(schema: GraphQLSchema, operation: OperationDefinitionNode) -> tuple | None:
    """The operation's variables as `_variables` coerces them, when none has a default value; None
    otherwise."""
    variables = []
    for node in operation.variable_definitions or ():
        signature = get_variable_signature(schema, node)
        if isinstance(signature, GraphQLError) or node.default_value is not None:
            return None
        non_null = is_non_null_type(signature.type)
        leaf = signature.type.of_type if non_null else signature.type
        if not is_leaf_type(leaf):
            variables.append((signature.name, signature, None, non_null, None))
            continue
        coerce = leaf.coerce_input_value
        variables.append((signature.name, signature, leaf, non_null,
                          _uuid_from_text if coerce is UUIDDefinition.parse_value else coerce))
    return tuple(variables)


def _uuid_from_text(value: Any) -> Any:
    """What strawberry's UUID scalar (`uuid.UUID(value)` for a string) makes of `value`, without
    `UUID.__init__`'s steps for a string with no colon and no brace: `UUID.__init__` then strips nothing but
    the hyphens, and reads the 32 characters left with `int(…, 16)`, as here. Anything else, and text that
    `int` refuses, goes to the scalar itself (its error included).

    A text read this way is kept with its UUID (`_UUIDS_READ`): a program sends the same id again and again
    (a call tree's reads, one account's), and a UUID is immutable, so the one read serves every time."""
    if type(value) is str:
        read = _UUIDS_READ.get(value)
        if read is not None:
            return read
        if ":" not in value and "{" not in value and "}" not in value:
            digits = value.replace("-", "")
            if len(digits) == 32:
                try:
                    number = int(digits, 16)
                except ValueError:
                    return UUIDDefinition.parse_value(value)
                read = uuid_of_int(number)  # 32 hex digits: 128 bits
                if len(_UUIDS_READ) >= _UUIDS_READ_LIMIT:
                    _UUIDS_READ.clear()
                _UUIDS_READ[value] = read  # racing threads store equal UUIDs: the last write wins harmlessly
                return read
    return UUIDDefinition.parse_value(value)


_UUIDS_READ: dict[str, uuid.UUID] = {}  # `_uuid_from_text`'s texts and their UUIDs, at most this many:
_UUIDS_READ_LIMIT = 1024




def _wrapped(definition: Any) -> Any:
    resolve = definition.resolve
    return lambda source, info, args: resolve(source, info, **args)


def _direct(definition: Any, field: Any, schema: GraphQLSchema | None = None) -> Any:
    """The field's resolver called as strawberry's wrapper calls it, without the wrapper's per-call work
    (an Info, the argument conversion, the extension chain): None when the field needs that work.

    A field without a resolver reads its attribute (strawberry's `_get_basic_result`). A resolver gets its
    arguments by their Python names, unchanged: strawberry converts only input types, enums and IDs, and
    this path takes only other scalars (plain, or optional), and input objects of such scalars, built as
    strawberry builds them (api/plan_inputs.py); `self` is the source, `info` a strawberry Info over
    graphql-core's, as the wrapper makes it."""
    resolver = field.base_resolver
    if resolver is None:
        python_name, default = field.python_name, field.default_resolver
        return lambda source, info, args: default(source, python_name)
    names = []
    builds = {}  # an input object argument's python name: how its instance is built (api/plan_inputs.py)
    for graphql_name, argument in definition.args.items():
        own = (argument.extensions or {}).get(_DEFINITION)
        if own is None:
            return None
        type_ = own.type
        if isinstance(type_, StrawberryMaybe):
            return None
        if isinstance(type_, StrawberryOptional):
            type_ = type_.of_type
        if isinstance(_named(argument.type), GraphQLInputObjectType) and not isinstance(
                type_, (StrawberryOptional, StrawberryList)) and schema is not None:
            build = input_builder(schema, type_)
            if build is None:
                return None
            builds[own.python_name] = build
        elif type_ is GlobalID or not isinstance(_named(argument.type), GraphQLScalarType) or isinstance(
                type_, (StrawberryOptional, StrawberryList)):
            return None
        names.append((graphql_name, own.python_name))
    takes_self = resolver.self_parameter is not None
    given_source = [p.name for p in (resolver.parent_parameter, resolver.root_parameter) if p is not None]
    info_name = resolver.info_parameter.name if resolver.info_parameter is not None else None
    # StrawberryResolver.__call__ only checks that its function is callable and calls it: the function
    # itself, when it is, spares a call a frame; otherwise the resolver, which raises what it raises.
    function = resolver.wrapped_func if callable(resolver.wrapped_func) else resolver
    if not names and not given_source and info_name is None:
        # A resolver of nothing but its source (a namespace field such as `financial`): called as the
        # general `call` below would call it, without its empty loops.
        if takes_self:
            return lambda source, info, args: function(source)
        return lambda source, info, args: function()

    def call(source: Any, info: GraphQLResolveInfo, args: dict) -> Any:
        kwargs = {python_name: args[graphql_name] for graphql_name, python_name in names if graphql_name in args}
        for python_name, build in builds.items():
            value = kwargs.get(python_name)
            if value is not None:  # null stays null, as strawberry converts it
                kwargs[python_name] = build(value)
        for name in given_source:
            kwargs[name] = source
        if info_name is not None:
            kwargs[info_name] = Info(info, field)
        return function(source, **kwargs) if takes_self else function(**kwargs)

    return call


def plan(schema: GraphQLSchema, document: Any, operation_name: str | None) -> Plan | None:
    """The plan of a parsed and validated document's operation, or None when it has none."""
    operation = get_operation_ast(document, operation_name)
    if operation is None or operation.operation not in (OperationType.QUERY, OperationType.MUTATION):
        return None
    root_type = schema.query_type if operation.operation == OperationType.QUERY else schema.mutation_type
    if root_type is None or operation.directives:
        return None
    try:
        fields = _selection(schema, root_type, operation.selection_set)
    except _Unplannable:
        return None
    return Plan(operation, root_type, fields, operation.operation == OperationType.MUTATION,
                _plain_variables(schema, operation))


def _variables(plan_: Plan, raw: dict) -> VariableValues | None:
    """What `get_variable_values` answers for variables without defaults, when they coerce: each given one
    coerced by its type (a scalar or an enum by the type itself; an input object or a list by graphql-core's
    `coerce_input_value` after its depth check, the steps `get_variable_values` takes), an omitted nullable
    one left out. None when one does not coerce, or a non-null one is null or missing: `get_variable_values`
    then answers (its errors)."""
    sources: dict[str, Any] = {}
    coerced: dict[str, Any] = {}
    for name, signature, leaf, non_null, coerce in plan_.variables:
        value = raw.get(name, Undefined)
        if leaf is None:
            if value is Undefined:
                if non_null:
                    return None
                sources[name] = VariableValueSource(signature)
                continue
            sources[name] = VariableValueSource(signature, value)
            if input_is_nested_too_deeply(value, signature.type):
                return None
            result = coerce_input_value(value, signature.type)
            if result is Undefined:
                return None
            coerced[name] = result
            continue
        if value is None or value is Undefined:
            if non_null:
                return None
            sources[name] = VariableValueSource(signature, value) if value is None else VariableValueSource(signature)
            if value is None:
                coerced[name] = None
            continue
        try:
            result = coerce(value)
        except Exception:  # graphql-core's coerce_input_value answers Undefined then
            return None
        if result is Undefined:
            return None
        sources[name] = VariableValueSource(signature, value)
        coerced[name] = result
    return VariableValues(sources, coerced)


def _arguments(field: _Field, variables: VariableValues) -> dict | None:
    """`get_argument_values` of a field whose arguments are all variables or literal objects of them
    (`_Field.arguments`), when each has a value it may take (None: that function answers, its errors
    included)."""
    coerced = variables.coerced
    args = {}
    for out_name, source, non_null in field.arguments:
        value = coerced.get(source, Undefined) if type(source) is str else _coerce_literal_object(source, coerced)
        if value is Undefined or (value is None and non_null):
            return None
        args[out_name] = value
    return args


def _coerce_literal_object(literal: _LiteralObject, coerced: dict) -> Any:
    """What graphql-core's `coerce_input_literal` answers for the literal object, given the coerced
    variables: its fields in the type's order, a field left out (or whose variable has no value) taking
    its default if it has one; Undefined where that function answers Undefined."""
    values: dict[str, Any] = {}
    for out_name, source, constant, required, non_null, field in literal.fields:
        if source is _CONSTANT:
            values[out_name] = constant
            continue
        value = Undefined if source is None else coerced.get(source, Undefined)
        if value is Undefined:
            if required:
                return Undefined
            default = coerce_default_value(field)
            if default is not Undefined:
                values[out_name] = default
            continue
        if value is None and non_null:
            return Undefined
        values[out_name] = value
    return literal.type.out_type(values)


class _Run:
    """One run of a plan: the state a graphql-core executor would hold, and nothing more."""

    __slots__ = ("schema", "plan", "context", "variables", "errors", "is_awaitable")

    def __init__(self, schema, plan_, context, variables, is_awaitable) -> None:
        self.schema = schema
        self.plan = plan_
        self.context = context
        self.variables = variables
        self.errors: list[GraphQLError] = []
        self.is_awaitable = is_awaitable

    def fields(self, parent: GraphQLObjectType, source: Any, path: Path | None, fields: tuple[_Field, ...]) -> dict:
        results = {}
        for field in fields:
            leaf = field.leaf
            if leaf is not None:
                # The plain case of `field` for an attribute read as a scalar, without the info and the path
                # that only a resolver or an error needs: the same value, or the general path from the start
                # (reading an attribute again is harmless: it is what the default resolver does).
                try:
                    result = field.resolve(source, None, _NO_ARGUMENTS)
                    value = (None if result is None or result is Undefined or isinstance(result, Exception)
                             else leaf.coerce_output_value(result))
                except Exception:
                    value = None
                if value is not None and value is not Undefined:
                    results[field.key] = value
                    continue
            namespace = field.namespace
            if namespace is not None and namespace[0] is not None:
                results[field.key] = self.namespace(field, namespace[0])
                continue
            fixed = field.path
            results[field.key] = self.field(parent, source, field,
                                            fixed if fixed is not None else Path(path, field.key, parent.name))
        return results

    def namespace(self, field: _Field, value: Any) -> Any:
        """`field` for a namespace field already resolved once: the same completion of the same kind of
        value (an object, neither null nor an error), and the same handling of its sub-selection's error."""
        try:
            return self.fields(field.object_type, value, field.path, field.selection)
        except Exception as raw_error:
            error = located_error(raw_error, field.nodes, field.path.as_list())
            if is_non_null_type(field.definition.type):
                raise error
            self.errors.append(error)
            return None

    def field(self, parent: GraphQLObjectType, source: Any, field: _Field, path: Path) -> Any:
        if field.definition is None:
            return parent.name  # __typename
        definition = field.definition
        return_type = definition.type
        info = None if field.blind else self._info(parent, field, path)
        try:
            args = _NO_ARGUMENTS
            if field.takes_arguments:
                args = None if field.arguments is None else _arguments(field, self.variables)
                if args is None:
                    args = get_argument_values(definition, field.node, self.variables)
            result = field.resolve(source, info, args)
            object_type = field.object_type
            if (object_type is not None and result is not None and result is not Undefined
                    and not isinstance(result, Exception)):
                if field.namespace is not None:
                    field.namespace[0] = result  # racing runs store equal values: any one will do
                return self.fields(object_type, result, path, field.selection)  # what `complete` would do
            if info is None:
                info = self._info(parent, field, path)
            return self.complete(return_type, field, info, path, result)
        except Exception as raw_error:
            error = located_error(raw_error, field.nodes, path.as_list())
            if is_non_null_type(return_type):
                raise error
            self.errors.append(error)
            return None

    def _info(self, parent: GraphQLObjectType, field: _Field, path: Path) -> GraphQLResolveInfo:
        return GraphQLResolveInfo(field.name, field.nodes, field.definition.type, parent, path, self.schema, {}, None,
                                  self.plan.operation, self.variables, self.context, self.is_awaitable, None, None)

    def complete(self, return_type: Any, field: _Field, info: GraphQLResolveInfo, path: Path, result: Any) -> Any:
        if isinstance(result, Exception):
            raise result
        if is_non_null_type(return_type):
            completed = self.complete(return_type.of_type, field, info, path, result)
            if completed is None:
                raise TypeError(f"Cannot return null for non-nullable field {info.parent_type}.{info.field_name}.")
            return completed
        if result is None or result is Undefined:
            return None
        if is_list_type(return_type):
            if not is_iterable(result):
                raise GraphQLError(f"Expected Iterable, but did not find one for field"
                                   f" '{info.parent_type}.{info.field_name}'.")
            item_type = return_type.of_type
            items = []
            for index, item in enumerate(result):
                item_path = path.add_key(index, None)
                try:
                    items.append(self.complete(item_type, field, info, item_path, item))
                except Exception as raw_error:
                    error = located_error(raw_error, field.nodes, item_path.as_list())
                    if is_non_null_type(item_type):
                        raise error
                    self.errors.append(error)
                    items.append(None)
            return items
        if is_leaf_type(return_type):
            coerced = return_type.coerce_output_value(result)
            if coerced is Undefined or coerced is None:
                raise TypeError(f"Expected `{inspect(return_type)}.coerce_output_value({inspect(result)})` to return"
                                f" non-nullable value, returned: {inspect(coerced)}")
            return coerced
        # An object (the plan has no abstract types).
        if return_type.is_type_of and not return_type.is_type_of(result, info):
            raise invalid_return_type_error(return_type, result, field.nodes)
        return self.fields(return_type, result, path, field.selection)


def run(schema: GraphQLSchema, plan_: Plan, context: Any, raw_variables: dict | None,
        is_awaitable: Any) -> tuple[Any, list[GraphQLError] | None] | None:
    """`(data, errors)` of the planned operation, or None when its variables do not coerce (then nothing
    ran, and the full execution reports them)."""
    raw = raw_variables or {}
    variables = _variables(plan_, raw) if plan_.variables is not None and type(raw) is dict else None
    if variables is None:
        variables = get_variable_values(schema, plan_.operation.variable_definitions or (), raw_variables or {},
                                        max_errors=50)
        if isinstance(variables, list):
            return None
    execution = _Run(schema, plan_, context, variables, is_awaitable)
    try:
        # Root fields run in document order either way: resolvers here are synchronous, so "serially"
        # (mutations) and "in parallel" (queries) run the same.
        data = execution.fields(plan_.root_type, None, None, plan_.fields)
    except GraphQLError as error:
        execution.errors.append(error)
        data = None
    return data, execution.errors or None
