"""The policy chain: one layer per principal and per tool on the call stack, all of which must allow.

One layer decides an operation on a resource like this: a matching DENY whose assertion is true or
cannot be evaluated denies; else a matching ALLOW whose assertion is true allows; else it denies.
A statement without an assertion counts as true.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cel_expr_python import cel

from ledger.errors import PermissionDenied
from ledger.policy.cel import CompiledAssertion, assertion_activation, cel_data
from ledger.policy.statements import OPERATIONS, Statement, resource_matches

NO_STATEMENT_ALLOWS = "no statement allows it"

# Resource names come from the schema, so a layer sees few distinct (operation, resource) pairs; the
# bound only guards against a caller passing arbitrary names.
_PLAN_CACHE_LIMIT = 2048

# (position in the layer's statements, its assertion or None for "always")
_Candidate = tuple[int, CompiledAssertion | None]


@dataclass(frozen=True)
class Denial:
    operation: str
    resource: str
    layer: str
    reason: str

    def error(self) -> PermissionDenied:
        return PermissionDenied(self.operation, self.resource, self.layer, self.reason)


class _DecisionInput:
    """The CEL activation of one decision, built only if some assertion needs it, then shared by
    every layer (cel-expr-python converts the data once per activation).

    The principal and the action may come as functions that make them, called only when a decision needs
    them; the document as it was read, with the function (`view`) that makes what assertions see of it,
    called only to evaluate one. Decisions are remembered by the document as read: `view` must make
    equal views of documents whose stand-ins (`_frozen`) are equal, keep their keys, and turn values
    only into text (as `scope.as_document` turns a UUID and a datetime), so that what converts to CEL
    (`_converts`) still does."""

    __slots__ = ("_operation", "_resource", "_principal", "_document", "_has_document", "_action", "_view",
                 "_activation", "_variables", "_key")

    def __init__(
        self, operation: str, resource: str, principal: Any, document: Any, has_document: bool, action: Any,
        view: Callable[[Any], Any] | None = None,
    ) -> None:
        self._operation = operation
        self._resource = resource
        self._principal = principal
        self._document = document
        self._has_document = has_document
        self._action = action
        self._view = view
        self._activation: cel.Activation | None = None
        self._variables: dict[str, Any] = {}
        self._key: tuple | None = None

    def _principal_made(self) -> Any:
        if callable(self._principal):
            self._principal = self._principal()
        return self._principal

    def _action_made(self) -> Any:
        if callable(self._action):
            self._action = self._action()
        return self._action

    def key(self) -> tuple | None:
        """The inputs as a hashable value (None when one is not hashable): equal keys decide alike."""
        if self._key is None:
            try:
                self._key = (self._operation, self._resource, self._has_document, _frozen(self._document),
                             _frozen(self._principal_made()), _frozen(self._action_made()))
                hash(self._key)
            except TypeError:
                self._key = ()
        return self._key or None

    def key_at(self, reads: tuple[tuple[str, ...], ...]) -> tuple | None:
        """The values at `reads` (an operation's paths, `_Plan.reads`) as a hashable value: equal keys decide
        alike for assertions that read only there. None when it cannot say: a variable read that might not
        convert to CEL (cel-expr-python converts a variable whole, and a variable that does not convert
        makes every reference to it an error, whatever the path)."""
        roots: dict[str, Any] = {}
        values = []
        for path in reads:
            name = path[0]
            if name in roots:
                root = roots[name]
            else:
                if name == "context":
                    root = {"operation": self._operation, "resource": self._resource}
                    if self._has_document:
                        root["document"] = self._document
                else:
                    root = self._principal_made() if name == "principal" else self._action_made()
                if not _converts(root):
                    return None
                roots[name] = root
            value = root
            for field_name in path[1:]:
                # A value that converts is a map only as a dict: selecting from anything else is an error.
                if type(value) is not dict:
                    value = _ABSENT
                    break
                value = value.get(field_name, _ABSENT)
                if value is _ABSENT:
                    break
            values.append(value if value is _ABSENT else _frozen(value))
        return (self._operation, self._resource, tuple(values))

    def activation(self) -> cel.Activation:
        if self._activation is None:
            context: dict[str, Any] = {"operation": self._operation, "resource": self._resource}
            if self._has_document:  # absent, not null, so `context.document.x` cannot be evaluated
                document = self._document if self._view is None else self._view(self._document)
                context["document"] = cel_data(document)
            self._variables = {"principal": cel_data(self._principal_made()), "context": context,
                               "action": cel_data(self._action_made())}
            self._activation = assertion_activation(**self._variables)
        return self._activation

    def variables(self) -> dict[str, Any]:
        """The activation's data (after `activation()`), for the bound on what an assertion builds."""
        return self._variables


# A path that breaks off (a missing key, a field of something not a map): its select is an error, wherever.
_ABSENT = object()

# Types whose equal values are the same CEL value (`cel_data`) once bool and float are told apart from int.
_FROZEN_AS_IS = frozenset({str, int, type(None), bytes, uuid.UUID, decimal.Decimal})
_ISO_TYPES = frozenset({dt.datetime, dt.date, dt.time})


def _frozen(value: Any) -> Any:
    """A hashable stand-in for a decision input: equal stand-ins are equal CEL values. Values that compare
    equal in Python but not in CEL stay apart (true and 1, 1 and 1.0 as values or as keys; times of one
    instant in two zones, whose ISO text differs); a type not known to keep that rule raises TypeError,
    so that the decision is not remembered."""
    kind = type(value)
    if kind in _FROZEN_AS_IS:
        return value
    if kind is dict:
        return tuple((_frozen(k), _frozen(v)) for k, v in value.items())
    if kind is list or kind is tuple:  # both a CEL list
        return ("[]", *(_frozen(v) for v in value))
    if kind is bool or kind is float:
        return (kind.__name__, value)
    if kind in _ISO_TYPES:
        return (kind.__name__, value.isoformat())
    raise TypeError(f"no stand-in for a {kind.__name__}")


def _converts(value: Any, depth: int = 0) -> bool:
    """Whether `cel_data(value)` certainly converts to CEL (False when unsure): a string must encode as
    UTF-8 (a lone surrogate does not) and a map's keys must be such strings. Past `_NESTING` levels it is
    unsure: `cel_data` recurses too, and so deep a value is decided as its whole inputs are (`key`)."""
    kind = type(value)
    if kind is dict:
        if depth >= _NESTING:
            return False
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or _encodes(key)):
                return False
            kind = type(item)  # a scalar checked here, not by a call: a document is mostly scalars
            if kind is str:
                if not (item.isascii() or _encodes(item)):
                    return False
            elif kind not in _CONVERTING and not _converts(item, depth + 1):
                return False
        return True
    if kind is str:
        return value.isascii() or _encodes(value)
    if kind is list or kind is tuple:
        if depth >= _NESTING:
            return False
        for item in value:
            if not _converts(item, depth + 1):
                return False
        return True
    return kind in _CONVERTING


_NESTING = 64

# Types `cel_data` turns into a CEL scalar (a too large int, a UUID or a time into text). Not Decimal: a
# signalling NaN makes `cel_data` raise.
_CONVERTING = frozenset({int, bool, float, type(None), bytes, uuid.UUID}) | _ISO_TYPES


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# Decisions a layer remembers (by their inputs) before it starts over.
_DECISION_CACHE_LIMIT = 1024


@dataclass(frozen=True)
class _Plan:
    """The statements of one layer that match one (operation, resource), in decision order."""

    denies: tuple[_Candidate, ...]  # cut after the first unconditional DENY: nothing later can matter
    allows: tuple[_Candidate, ...]  # just the unconditional ALLOW when there is one
    # The paths every assertion evaluated here reads (sorted), or None when one's reads are not bounded:
    # a decision is then remembered by its whole inputs.
    reads: tuple[tuple[str, ...], ...] | None = None


def _plan(statements: tuple[tuple[int, Statement], ...], resource: str) -> _Plan:
    denies: list[_Candidate] = []
    allows: list[_Candidate] = []
    for position, statement in statements:
        if not any(resource_matches(pattern, resource) for pattern in statement.resources):
            continue
        (denies if statement.effect == "DENY" else allows).append((position, statement.compiled))
    for cut, (_, compiled) in enumerate(denies):
        if compiled is None:
            denies = denies[: cut + 1]
            break
    unconditional_allows = [candidate for candidate in allows if candidate[1] is None]
    allows = unconditional_allows[:1] or allows
    reads: set[tuple[str, ...]] | None = set()
    for _, compiled in (*denies, *allows):
        if compiled is not None:
            if compiled.reads is None:
                reads = None
                break
            reads.update(compiled.reads)
    return _Plan(tuple(denies), tuple(allows), None if reads is None else tuple(sorted(reads)))


@dataclass(frozen=True)
class Layer:
    """One principal's or one tool version's statements.

    `name` is for people, e.g. `client "admin" (8c1e...)` or `tool "transfer" v3`. `allow_all` is the
    native `graphql` tool's layer; a layer without statements denies everything (the `cel` tool's).
    """

    name: str
    statements: tuple[Statement, ...]
    allow_all: bool = False
    # The `principal` this layer's assertions see instead of the operation's: in a confirmed plan's run
    # (DESIGN 14) the confirmer's client layer sees the confirmer, while every other layer sees the proposer.
    principal: dict | None = field(default=None, compare=False)
    _by_operation: dict[str, tuple[tuple[int, Statement], ...]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )
    _plans: dict[tuple[str, str], _Plan] = field(init=False, repr=False, compare=False, default_factory=dict)
    # Decisions that evaluated an assertion, by their inputs, or by the values at the paths the assertions
    # read when those are bounded (`_Plan.reads`): a CEL evaluation is deterministic, and a request (a
    # listing, a tree of reads) and calls alike (transfers of one amount) ask one layer the same question.
    _decided: dict[tuple, str | None] = field(init=False, repr=False, compare=False, default_factory=dict)
    # `allows_whatever_the_inputs` by operation and resource: a function of the statements alone, asked of
    # every layer of the chain before every check.
    _whatever: dict[tuple[str, str], bool] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "statements", tuple(self.statements))
        for operation in OPERATIONS:
            self._by_operation[operation] = tuple(
                (position, statement)
                for position, statement in enumerate(self.statements)
                if operation in statement.actions
            )

    def has_allow_for(self, operations: tuple[str, ...] | frozenset[str]) -> bool:
        """Whether any ALLOW statement names one of `operations`, whatever its resources and assertion:
        a layer without one can never allow them (MCP's `readOnlyHint`, DESIGN 12)."""
        if self.allow_all:
            return True
        return any(statement.effect == "ALLOW" for operation in operations
                   for _, statement in self._by_operation.get(operation, ()))

    def allows_whatever_the_inputs(self, operation: str, resource: str) -> bool:
        """Whether this layer allows `operation` on `resource` for any document, principal and action: it
        allows everything, or an unconditional ALLOW matches and no DENY could (`denial_reason` is None)."""
        key = (operation, resource)
        verdict = self._whatever.get(key)
        if verdict is None:
            verdict = self.allow_all or _unconditional(self._plan_for(operation, resource))
            if len(self._whatever) >= _PLAN_CACHE_LIMIT:
                self._whatever.clear()
            self._whatever[key] = verdict
        return verdict

    def denial_reason(self, operation: str, resource: str, decision: _DecisionInput) -> str | None:
        """Why this layer denies, or None when it allows."""
        if self.allow_all:
            return None
        plan = self._plan_for(operation, resource)
        if _unconditional(plan):
            return None  # nothing to evaluate
        key = decision.key() if plan.reads is None else decision.key_at(plan.reads)
        if key is not None:
            try:
                return self._decided[key]
            except KeyError:
                pass
        reason = self._evaluate(plan, decision)
        if key is not None:
            if len(self._decided) >= _DECISION_CACHE_LIMIT:
                self._decided.clear()
            self._decided[key] = reason
        return reason

    @staticmethod
    def _evaluate(plan: _Plan, decision: _DecisionInput) -> str | None:
        for position, assertion in plan.denies:
            if assertion is None:
                return f"denied by statement policies[{position}]"
            verdict = assertion.evaluate_in(decision.activation(), decision.variables())
            if verdict is None:
                return f"denied by statement policies[{position}] (its assertion cannot be evaluated)"
            if verdict:
                return f"denied by statement policies[{position}]"
        unevaluable: list[int] = []
        for position, assertion in plan.allows:
            if assertion is None:
                return None
            verdict = assertion.evaluate_in(decision.activation(), decision.variables())
            if verdict:
                return None
            if verdict is None:
                unevaluable.append(position)
        if unevaluable:
            which = ", ".join(f"policies[{position}]" for position in unevaluable)
            return f"{NO_STATEMENT_ALLOWS} (the assertion of {which} cannot be evaluated)"
        return NO_STATEMENT_ALLOWS

    def _plan_for(self, operation: str, resource: str) -> _Plan:
        key = (operation, resource)
        plan = self._plans.get(key)
        if plan is None:
            plan = _plan(self._by_operation.get(operation, ()), resource)
            if len(self._plans) >= _PLAN_CACHE_LIMIT:
                self._plans.clear()
            # Racing threads compute the same plan; the last write wins harmlessly.
            self._plans[key] = plan
        return plan


def _unconditional(plan: _Plan) -> bool:
    """An unconditional ALLOW matches and no DENY could: the layer allows whatever the inputs."""
    return not plan.denies and bool(plan.allows) and plan.allows[0][1] is None


@dataclass(frozen=True)
class Chain:
    """The layers an operation must pass, outermost (the caller's client) first."""

    layers: tuple[Layer, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))

    def extended(self, layer: Layer) -> Chain:
        return Chain(self.layers + (layer,))

    def allows_whatever_the_inputs(self, operation: str, resource: str) -> bool:
        """Whether `decide` allows `operation` on `resource` whatever the document, principal and action
        (every layer allows it unconditionally): a caller may then skip building those inputs."""
        if operation not in OPERATIONS or not self.layers:
            return False
        for layer in self.layers:  # a loop, not all() over a generator: this runs before every check
            if not layer.allows_whatever_the_inputs(operation, resource):
                return False
        return True

    def decide(
        self,
        operation: str,
        resource: str,
        *,
        principal: dict | Callable[[], dict],
        document: dict | None = None,
        has_document: bool,
        action: dict | None | Callable[[], dict | None],
        document_view: Callable[[dict], dict] | None = None,
    ) -> Denial | None:
        """None when every layer allows; else the first (outermost) layer's denial.

        `principal` and `action` may be functions that make them, called only if an assertion needs them;
        `document_view` makes what assertions see of `document` (see `_DecisionInput` for what it must keep)."""
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}; expected one of {', '.join(OPERATIONS)}")
        if not self.layers:  # fail closed: a chain nobody built up must not grant anything
            return Denial(operation, resource, "empty chain", "the chain has no layers")
        decision = _DecisionInput(operation, resource, principal, document, has_document, action, document_view)
        for layer in self.layers:
            seen = decision
            if layer.principal is not None:
                seen = _DecisionInput(operation, resource, layer.principal, document, has_document, action,
                                      document_view)
            reason = layer.denial_reason(operation, resource, seen)
            if reason is not None:
                return Denial(operation, resource, layer.name, reason)
        return None

    def check(
        self,
        operation: str,
        resource: str,
        *,
        principal: dict | Callable[[], dict],
        document: dict | None = None,
        has_document: bool,
        action: dict | None | Callable[[], dict | None],
        document_view: Callable[[dict], dict] | None = None,
    ) -> None:
        """Raise PermissionDenied naming the denying layer unless every layer allows (arguments as `decide`'s)."""
        denial = self.decide(
            operation, resource, principal=principal, document=document, has_document=has_document, action=action,
            document_view=document_view,
        )
        if denial is not None:
            raise denial.error()
