"""This process's ends of the channels between actors, built from their specs.

The runtime that places actors describes every channel (``ChannelSpec``: an id, the two
actors, where each runs) and every dispatcher (``DispatcherSpec``). Each process then
builds the ends that belong to it: a channel whose two actors run here is one in-memory
``Channel``, shared by the dispatcher that sends and the actor that reads; a channel to
or from an actor elsewhere is one end of a remote channel, over the exchange connection
to that process. The same specs, built in one process or in several, make the same
dataflow.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

import numpy as np

from rivulet.stream.exchange import (
    BroadcastDispatcher,
    Channel,
    Dispatcher,
    HashDispatcher,
    Output,
    SimpleDispatcher,
)
from rivulet.stream.message import ChannelSpec, DispatcherSpec
from rivulet.stream.remote_exchange import ExchangeConnection

# The exchange connection to another process, by its node id.
ConnectionTo = Callable[[int], ExchangeConnection]


class ChannelEnds:
    """Builds the ends of channels that run in process ``node``."""

    def __init__(self, node: int = 0, connection_to: ConnectionTo | None = None) -> None:
        self.node = node
        self._connection_to = connection_to
        # In-memory channels built by one of their two ends, waiting for the other.
        self._local: dict[int, Channel] = {}
        # The remote channels whose end here was built, and the node at the other end.
        self._remote: dict[int, int] = {}

    def receiver(self, spec: ChannelSpec) -> Channel:
        """What the downstream actor (running here) reads."""
        assert spec.downstream_node == self.node, spec
        if spec.upstream_node == self.node:
            return self._shared(spec.channel_id)
        self._remote[spec.channel_id] = spec.upstream_node
        return self._connection(spec.upstream_node).open_inbound(spec.channel_id)

    def sender(self, spec: ChannelSpec) -> Channel:
        """What the upstream actor's dispatcher (running here) sends to."""
        assert spec.upstream_node == self.node, spec
        if spec.downstream_node == self.node:
            return self._shared(spec.channel_id)
        self._remote[spec.channel_id] = spec.downstream_node
        outbound = self._connection(spec.downstream_node).open_outbound(spec.channel_id)
        return outbound  # type: ignore[return-value]  # a Channel for its senders

    def dispatcher(self, spec: DispatcherSpec) -> Dispatcher:
        outputs = [Output(c.downstream_actor, self.sender(c)) for c in spec.outputs]
        if spec.kind == "hash":
            assert spec.mapping is not None
            mapping = np.asarray(spec.mapping, dtype=np.int64)
            return HashDispatcher(spec.dispatcher_id, outputs, list(spec.key), mapping)
        if spec.kind == "broadcast":
            return BroadcastDispatcher(spec.dispatcher_id, outputs)
        assert spec.kind == "simple", spec.kind
        return SimpleDispatcher(spec.dispatcher_id, outputs)

    def forget(self, channel_ids: Iterable[int]) -> None:
        """Channels whose actors here are gone: an in-memory one whose other end was
        never built (an abandoned build), a remote one's end here (its connection stops
        routing to it)."""
        for cid in channel_ids:
            self._local.pop(cid, None)
            node = self._remote.pop(cid, None)
            if node is not None and self._connection_to is not None:
                with contextlib.suppress(ConnectionError, KeyError):
                    self._connection_to(node).close_channel(cid)

    def _shared(self, channel_id: int) -> Channel:
        channel = self._local.pop(channel_id, None)
        if channel is None:
            channel = self._local[channel_id] = Channel()
        return channel

    def _connection(self, node: int) -> ExchangeConnection:
        if self._connection_to is None:
            raise ConnectionError(f"no exchange to node {node}: every actor runs here")
        return self._connection_to(node)
