"""JSON values as the contracts carry them: what every file of a dataset, model or sweep directory and every control
message holds once decoded. A contract's own type (a frozen dataclass, a TypedDict) says which keys and types; these
name the JSON around it, where a reader must not assume more than JSON gives (`Json` for what `json.loads` returns,
`JsonObject` for an object read or about to be written)."""
from __future__ import annotations

from typing import Mapping, Sequence, Union

Json = Union[None, bool, int, float, str, Sequence["Json"], Mapping[str, "Json"]]  # read-only: JSON as read
JsonObject = Mapping[str, Json]  # read-only: a dict[str, float] is one too
