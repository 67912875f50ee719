"""What flows between actors: chunks of changes, and barriers that cut them into epochs.

A barrier with epoch ``e`` ends epoch ``e``: every chunk an actor sees before it belongs
to epoch ``e``, every chunk after it to ``e + 1``. A barrier may carry a mutation that
changes the dataflow at exactly that point (new downstream actors, actors that stop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rivulet.common.chunk import StreamChunk


@dataclass(frozen=True, slots=True)
class ChannelSpec:
    """One channel between two actors, named by an id both ends agree on (the runtime
    that places the actors chooses it). ``*_node``: where each end runs (0: the process
    of meta); the downstream actor reads it as one of its inputs from
    ``upstream_fragment``."""

    channel_id: int
    upstream_actor: int
    downstream_actor: int
    upstream_fragment: int
    upstream_node: int = 0
    downstream_node: int = 0

    def to_json(self) -> list[int]:
        return [
            self.channel_id, self.upstream_actor, self.downstream_actor,
            self.upstream_fragment, self.upstream_node, self.downstream_node,
        ]  # fmt: skip

    @classmethod
    def from_json(cls, doc: list[int]) -> ChannelSpec:
        return cls(*(int(v) for v in doc))


@dataclass(frozen=True, slots=True)
class DispatcherSpec:
    """A dispatcher of an upstream actor, as plain data: ``kind`` is ``hash`` (by the
    vnode of ``key``, ``mapping[vnode]`` the output's index), ``broadcast`` or
    ``simple``; ``outputs`` are its channels in order. Each process builds the
    dispatchers of its own actors from these."""

    dispatcher_id: int
    kind: str
    outputs: tuple[ChannelSpec, ...]
    key: tuple[int, ...] = ()
    mapping: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.dispatcher_id,
            "kind": self.kind,
            "outputs": [o.to_json() for o in self.outputs],
            "key": list(self.key),
            "mapping": None if self.mapping is None else list(self.mapping),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DispatcherSpec:
        mapping = doc["mapping"]
        return cls(
            int(doc["id"]),
            str(doc["kind"]),
            tuple(ChannelSpec.from_json(o) for o in doc["outputs"]),
            tuple(int(k) for k in doc["key"]),
            None if mapping is None else tuple(int(m) for m in mapping),
        )


class Mutation:
    """A change of the dataflow applied when the barrier carrying it passes."""


@dataclass(frozen=True, slots=True)
class AddOutputs(Mutation):
    """Upstream actors start sending to new downstream actors after this barrier:
    ``outputs[upstream actor id]`` are the dispatchers to add."""

    outputs: dict[int, list[DispatcherSpec]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StopActors(Mutation):
    """These actors stop after this barrier; upstream actors drop their outputs to them."""

    actors: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Barrier:
    epoch: int
    checkpoint: bool = True
    mutation: Mutation | None = None

    def stops(self, actor_id: int) -> bool:
        return isinstance(self.mutation, StopActors) and actor_id in self.mutation.actors


Message = StreamChunk | Barrier
