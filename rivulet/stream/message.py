"""What flows between actors: chunks of changes, and barriers that cut them into epochs.

A barrier with epoch ``e`` ends epoch ``e``: every chunk an actor sees before it belongs
to epoch ``e``, every chunk after it to ``e + 1``. A barrier may carry a mutation that
changes the dataflow at exactly that point (new downstream actors, actors that stop).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rivulet.common.chunk import StreamChunk


class Mutation:
    """A change of the dataflow applied when the barrier carrying it passes."""


@dataclass(frozen=True, slots=True)
class AddOutputs(Mutation):
    """Upstream actors start sending to new downstream actors after this barrier:
    ``outputs[upstream actor id]`` are the dispatchers to add."""

    outputs: dict[int, list[object]] = field(default_factory=dict)


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
