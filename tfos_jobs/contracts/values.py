"""JSON values as the contracts carry them: what every file of a dataset, model or sweep
directory and every control message holds once decoded. A contract's own type (a frozen
dataclass, a TypedDict) says which keys and types; these name the JSON around it, where a
reader must not assume more than JSON gives (`Json` for what `json.loads` returns, `JsonObject`
for an object read or about to be written); `wrong_keys` checks an object against a TypedDict."""
from __future__ import annotations

from types import UnionType
from typing import Any, Mapping, Sequence, Union, get_args, get_origin, get_type_hints, is_typeddict

Json = Union[None, bool, int, float, str, Sequence["Json"], Mapping[str, "Json"]]  # read-only: JSON as read
JsonObject = Mapping[str, Json]  # read-only: a dict[str, float] is one too


def wrong_keys(cls: Any, data: Mapping[str, object]) -> list[str]:
    """What decoded JSON `data` lacks of TypedDict `cls`'s keys, or holds with a value of another
    type ("epochs missing", "final is not dict[str, float]"), in `cls`'s order."""
    written = {k: getattr(a, "__forward_arg__", a) for k, a in cls.__annotations__.items()}  # as in the source
    return [f"{k} missing" if k not in data else f"{k} is not {written[k]}" for k, hint in get_type_hints(cls).items()
            if k in cls.__required_keys__ and (k not in data or not fits(data[k], hint))]


def fits(value: object, hint: Any) -> bool:
    """Whether decoded JSON `value` is of type `hint`: a TypedDict, dict[str, X], list[X], a union
    of these, str, int, float (an int too), bool or None; any other hint (`Json`) takes any value."""
    origin, args = get_origin(hint), get_args(hint)
    if is_typeddict(hint):
        return isinstance(value, dict) and not wrong_keys(hint, value)
    if origin in (Union, UnionType):
        return any(fits(value, arg) for arg in args)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) and fits(v, args[1]) for k, v in value.items())
    if origin is list:
        return isinstance(value, list) and all(fits(v, args[0]) for v in value)
    if hint in (str, int, float, bool, type(None)):
        number = (int, float) if hint is float else hint
        return isinstance(value, number) and (hint is bool or not isinstance(value, bool))
    return True
