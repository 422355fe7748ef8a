"""An input object argument built for a planned field (api/plans.py `_direct`) as strawberry builds it.

A mutation takes its values in an input object (`createTransfer(id, input: {fromAccountId, ...})`,
`invokeAction(id, input: {executionId, input})`). Strawberry's resolver wrapper converts each argument on
every call (`convert_arguments`: a walk over the input type's fields with a name conversion and a type
resolution per field, and an `Info`), the largest part of the wrapper's cost for such a field. For an input
type whose fields are all scalars, the conversion amounts to renaming graphql-core's coerced values to the
type's Python names and calling the type: that is done here, the names resolved once per plan.

Anything the conversion does more for (an enum, a `GlobalID`, a list, a nested input object, `Maybe`, a
type that builds itself with `from_input`) has no builder: the field keeps strawberry's own wrapper.
"""

from __future__ import annotations

from dataclasses import MISSING
from typing import Any, Callable, Mapping

from strawberry.relay.types import GlobalID
from strawberry.types.arguments import _is_leaf_type
from strawberry.types.base import StrawberryList, StrawberryMaybe, StrawberryOptional, has_object_definition
from strawberry.types.enum import StrawberryEnumDefinition, has_enum_definition

_DEFINITION = "strawberry-definition"  # strawberry's back-reference from the GraphQL schema to its own


def input_builder(graphql_schema: Any, type_: Any) -> Callable[[Mapping[str, Any]], Any] | None:
    """A function building an instance of the strawberry input type `type_` from graphql-core's coerced
    value of it, as strawberry's `convert_argument` builds it; None when `type_` is not an input type of
    scalar fields only (optional or not)."""
    schema = (graphql_schema.extensions or {}).get(_DEFINITION)
    if schema is None or not has_object_definition(type_) or has_enum_definition(type_):
        return None
    definition = type_.__strawberry_definition__
    if not definition.is_input or getattr(definition, "from_input", None) is not None:
        return None
    registry, names = schema.schema_converter.scalar_registry, schema.config.name_converter
    fields = []
    for field in definition.fields:
        field_type = field.resolve_type(type_definition=definition)
        if isinstance(field_type, StrawberryMaybe):
            return None
        if isinstance(field_type, StrawberryOptional):
            field_type = field_type.of_type
        if (field_type is GlobalID or isinstance(field_type, (StrawberryOptional, StrawberryList,
                                                              StrawberryEnumDefinition))
                or has_enum_definition(field_type) or not _is_leaf_type(field_type, registry)):
            return None
        fields.append((names.from_field(field), field.python_name))
    # As strawberry: a field without a default is None unless given (graphql-core has already refused a
    # missing non-null one); a field with a default keeps it unless given.
    implicit = tuple(field.python_name for field in definition.fields
                     if field.default_value is MISSING and field.default_factory is MISSING)
    fields_ = tuple(fields)

    def build(value: Mapping[str, Any]) -> Any:
        kwargs: dict[str, Any] = dict.fromkeys(implicit)
        for graphql_name, python_name in fields_:
            if graphql_name in value:
                kwargs[python_name] = value[graphql_name]  # a scalar: converted already, as strawberry keeps it
        return type_(**kwargs)

    return build
