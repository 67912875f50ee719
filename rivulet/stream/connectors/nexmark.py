"""The ``nexmark`` connector: the Nexmark benchmark's auction events, vectorized.

The rules are the Nexmark generator's (as RisingWave runs it): events are numbered
``0, 1, 2, ...``; of every 50 (``person + auction + bid proportion``), the first is a
Person, the next 3 Auctions and the other 46 Bids. A Person's id is ``1000 + n // 50``,
Auctions are numbered ``1000, 1001, ...`` in event order; a bid goes to a recent auction
(half of them to a "hot" one: the latest id rounded down to a multiple of 100) by a recent
person (three in four hot); prices are ``round(100 * 10^(6u))`` cents (100 to
100,000,000); an auction expires a random time within twice the time 100 auctions take to
arrive; event ``n`` happens at ``base time + n * 100 µs`` (10,000 events per second of
event time; ``nexmark.first.event.rate``), base time 2015-07-15 00:00:00 UTC.

One table type per source (``nexmark.table.type`` = Person | Auction | Bid), as
RisingWave's typed sources. Split ``s`` of ``S`` produces that type's events ``s, s + S,
s + 2S, ...``; ``nexmark.event.num`` bounds the event number (all types counted), and
``nexmark.min.event.gap.in.ns`` paces the splits together to one event per gap (default
100,000 ns: 10,000 events/s; 0: as fast as possible). Values are hashes of the event id,
so replay from an offset reproduces the same events; ``_row_id`` is the event number.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from rivulet.common.chunk import ROW_ID_COLUMN
from rivulet.common.errors import FEATURE_NOT_SUPPORTED, sql_error
from rivulet.common.types import BIGINT, TIMESTAMP, VARCHAR, DataType
from rivulet.stream.connectors.base import (
    LOWER_POOL,
    MAX_POOL_STRING,
    ColumnSpec,
    Connector,
    Draws,
    Options,
    ReadBatch,
    bad_value,
    fixed_width_strings,
    pool_strings,
)

# 2015-07-15 00:00:00 UTC in milliseconds: the base time of typed nexmark sources.
BASE_TIME_MS = 1_436_918_400_000

TABLE_COLUMNS: dict[str, list[tuple[str, DataType]]] = {
    "Person": [
        ("id", BIGINT), ("name", VARCHAR), ("email_address", VARCHAR),
        ("credit_card", VARCHAR), ("city", VARCHAR), ("state", VARCHAR),
        ("date_time", TIMESTAMP), ("extra", VARCHAR),
    ],
    "Auction": [
        ("id", BIGINT), ("item_name", VARCHAR), ("description", VARCHAR),
        ("initial_bid", BIGINT), ("reserve", BIGINT), ("date_time", TIMESTAMP),
        ("expires", TIMESTAMP), ("seller", BIGINT), ("category", BIGINT), ("extra", VARCHAR),
    ],
    "Bid": [
        ("auction", BIGINT), ("bidder", BIGINT), ("price", BIGINT), ("channel", VARCHAR),
        ("url", VARCHAR), ("date_time", TIMESTAMP), ("extra", VARCHAR),
    ],
}  # fmt: skip

_TABLE_TYPES = {"person": "Person", "auction": "Auction", "bid": "Bid"}

# Options RisingWave accepts that do not change typed events here.
_ACCEPTED_UNUSED = (
    "nexmark.out.of.order.group.size", "nexmark.rate.shape", "nexmark.rate.period",
    "nexmark.sine.approx.steps", "nexmark.next.event.rate", "nexmark.events.per.sec",
)  # fmt: skip

_DEFAULT_LISTS = {
    "nexmark.us.states": "az,ca,id,or,wa,wy",
    "nexmark.us.cities": "phoenix,los angeles,san francisco,boise,portland,bend,redmond,"
    "seattle,kent,cheyenne",
    "nexmark.first.names": "peter,paul,luke,john,saul,vicky,kate,julie,sarah,deiter,walter",
    "nexmark.last.names": "shultz,abrams,spencer,white,bartels,walton,smith,jones,noris",
}
_HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
_CHANNELS = 10_000

# Draw numbers: each value of an event has its own random stream.
_D_NAME1, _D_NAME2, _D_EMAIL1, _D_EMAIL2, _D_CARD, _D_CITY, _D_STATE = range(7)
_D_EXTRA_LEN, _D_EXTRA_POS = 8, 9
_D_ITEM, _D_DESC, _D_PRICE1, _D_PRICE2, _D_EXPIRES, _D_HOT, _D_NEXT, _D_CATEGORY = range(10, 18)
_D_HOT2, _D_NEXT2, _D_CHANNEL_HOT, _D_CHANNEL = range(18, 22)


@dataclass(frozen=True)
class NexmarkConfig:
    table_type: str
    split_num: int = 1
    event_num: int | None = None
    min_event_gap_ns: int = 100_000
    use_real_time: bool = False
    chunk_rows: int = 65536
    base_time_ms: int = BASE_TIME_MS
    first_event_rate: int = 10_000
    us_per_unit: int = 1_000_000
    generators: int = 1
    active_people: int = 1000
    in_flight_auctions: int = 100
    avg_person_byte_size: int = 200
    avg_auction_byte_size: int = 500
    avg_bid_byte_size: int = 100
    hot_seller_ratio: int = 4
    hot_auction_ratio: int = 2
    hot_bidder_ratio: int = 4
    hot_channel_ratio: int = 2
    hot_seller_ratio_2: int = 100
    hot_auction_ratio_2: int = 100
    hot_bidder_ratio_2: int = 100
    first_event_id: int = 0
    first_event_number: int = 0
    num_categories: int = 5
    auction_id_lead: int = 10
    person_id_lead: int = 10
    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    first_auction_id: int = 1000
    first_person_id: int = 1000
    first_category_id: int = 10
    us_states: tuple[str, ...] = ()
    us_cities: tuple[str, ...] = ()
    first_names: tuple[str, ...] = ()
    last_names: tuple[str, ...] = ()

    @property
    def denominator(self) -> int:
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    @property
    def inter_event_delay_us(self) -> float:
        return self.us_per_unit / self.first_event_rate * self.generators


def table_type_of(options: Options) -> str | None:
    return options.choice("nexmark.table.type", _TABLE_TYPES, None)


def parse_config(options: Options) -> NexmarkConfig:
    table_type = table_type_of(options)
    if table_type is None:
        raise sql_error(
            FEATURE_NOT_SUPPORTED,
            "a nexmark source without nexmark.table.type (the combined event stream) is not"
            " supported yet",
            hint="Set nexmark.table.type to 'Person', 'Auction' or 'Bid'.",
        )
    o = options
    ints = {
        "split_num": o.int("nexmark.split.num", 1, minimum=1),
        "min_event_gap_ns": o.int("nexmark.min.event.gap.in.ns", 100_000),
        "chunk_rows": o.int("nexmark.max.chunk.size", 65536, minimum=1),
        "base_time_ms": o.int("nexmark.base.time", BASE_TIME_MS),
        "first_event_rate": o.int("nexmark.first.event.rate", 10_000, minimum=1),
        "us_per_unit": o.int("nexmark.us.per.unit", 1_000_000, minimum=1),
        "generators": o.int("nexmark.threads", 1, minimum=1),
        "active_people": o.int("nexmark.active.people", 1000, minimum=1),
        "in_flight_auctions": o.int("nexmark.in.flight.auctions", 100, minimum=1),
        "avg_person_byte_size": _byte_size(o, "nexmark.avg.person.byte.size", 200),
        "avg_auction_byte_size": _byte_size(o, "nexmark.avg.auction.byte.size", 500),
        "avg_bid_byte_size": _byte_size(o, "nexmark.avg.bid.byte.size", 100),
        "hot_seller_ratio": o.int("nexmark.hot.seller.ratio", 4, minimum=1),
        "hot_auction_ratio": o.int("nexmark.hot.auction.ratio", 2, minimum=1),
        "hot_bidder_ratio": o.int("nexmark.hot.bidder.ratio", 4, minimum=1),
        "hot_channel_ratio": o.int("nexmark.hot.channel.ratio", 2, minimum=1),
        "hot_seller_ratio_2": o.int("nexmark.hot.seller.ratio.2", 100, minimum=1),
        "hot_auction_ratio_2": o.int("nexmark.hot.auction.ratio.2", 100, minimum=1),
        "hot_bidder_ratio_2": o.int("nexmark.hot.bidder.ratio.2", 100, minimum=1),
        "first_event_id": o.int("nexmark.first.event.id", 0),
        "first_event_number": o.int("nexmark.first.event.number", 0),
        "num_categories": o.int("nexmark.num.categories", 5, minimum=1),
        "auction_id_lead": o.int("nexmark.auction.id.lead", 10),
        "person_id_lead": o.int("nexmark.person.id.lead", 10),
        "person_proportion": o.int("nexmark.person.proportion", 1, minimum=1),
        "auction_proportion": o.int("nexmark.auction.proportion", 3, minimum=1),
        "bid_proportion": o.int("nexmark.bid.proportion", 46, minimum=1),
        "first_auction_id": o.int("nexmark.first.auction.id", 1000),
        "first_person_id": o.int("nexmark.first.person.id", 1000),
        "first_category_id": o.int("nexmark.first.category.id", 10),
    }
    raw_num = o.get("nexmark.event.num")
    event_num = None
    if raw_num is not None:
        event_num = o.int("nexmark.event.num", 0)
        if event_num >= 2**63:
            event_num = None
    lists = {}
    for key, default in _DEFAULT_LISTS.items():
        raw = o.get(key)
        items = tuple(s for s in (raw if raw is not None else default).split(","))
        if not items or any(not s for s in items):
            raise bad_value(key, raw or "", "a comma-separated list of names")
        lists[key.removeprefix("nexmark.").replace(".", "_")] = items
    for key in _ACCEPTED_UNUSED:
        o.get(key)
    return NexmarkConfig(
        table_type=table_type,
        event_num=event_num,
        use_real_time=o.bool("nexmark.use.real.time", False),
        **ints,
        **lists,
    )


def _byte_size(options: Options, key: str, default: int) -> int:
    value = options.int(key, default)
    if value > MAX_POOL_STRING // 2:
        raise bad_value(key, str(value), f"a size of at most {MAX_POOL_STRING // 2} bytes")
    return value


@functools.cache
def _channel_map() -> tuple[pa.Array, pa.Array]:
    """The channels and urls bids pick from: 10,000 pairs, then the four hot ones."""
    urls = _base_urls(np.arange(_CHANNELS, dtype=np.int64))
    keyed = Draws(np.arange(_CHANNELS, dtype=np.int64), 0x6368616E)
    with_id = keyed.below(0, 10) > 0
    full = []
    for i, url in enumerate(urls):
        if with_id[i]:
            reversed_bits = int(f"{i:032b}"[::-1], 2)
            as_i32 = reversed_bits - (1 << 32) if reversed_bits >= 1 << 31 else reversed_bits
            url = f"{url}&channel_id={abs(as_i32)}"
        full.append(url)
    channels = [f"channel-{i}" for i in range(_CHANNELS)] + list(_HOT_CHANNELS)
    full += urls[: len(_HOT_CHANNELS)]
    return pa.array(channels, pa.string()), pa.array(full, pa.string())


def _base_urls(seeds: np.ndarray) -> list[str]:
    """``https://www.nexmark.com/<a>/<b>/<c>/item.htm?query=1`` with three random words
    of 3 or 4 letters (sometimes '_')."""
    d = Draws(seeds, 0x75726C)
    parts = []
    for w in range(3):
        lengths = 3 + d.below(w * 10, 2)
        chars = []
        for c in range(4):
            letter = (d.below(w * 10 + 1 + 2 * c, 26) + ord("a")).astype(np.uint8)
            under = d.below(w * 10 + 2 + 2 * c, 13) == 0
            chars.append(np.where(under, np.uint8(ord("_")), letter))
        matrix = np.stack(chars, axis=1)
        parts.append([bytes(matrix[i, : lengths[i]]).decode() for i in range(len(seeds))])
    return [f"https://www.nexmark.com/{a}/{b}/{c}/item.htm?query=1" for a, b, c in zip(*parts)]


class NexmarkConnector(Connector):
    name = "nexmark"

    def __init__(self, options: Options, columns: list[ColumnSpec]) -> None:
        self.cfg = cfg = parse_config(options)
        self.split_num = cfg.split_num
        self.chunk_rows = cfg.chunk_rows
        self.columns = columns
        kind = cfg.table_type
        self.proportion = {
            "Person": cfg.person_proportion,
            "Auction": cfg.auction_proportion,
            "Bid": cfg.bid_proportion,
        }[kind]
        self.before = {
            "Person": 0,
            "Auction": cfg.person_proportion,
            "Bid": cfg.person_proportion + cfg.auction_proportion,
        }[kind]
        self._names = pa.array([f"{a} {b}" for a in cfg.first_names for b in cfg.last_names])
        self._name_lens = np.array(
            [len(f"{a} {b}") for a in cfg.first_names for b in cfg.last_names], dtype=np.int64
        )
        self._cities = pa.array(list(cfg.us_cities), pa.string())
        self._city_lens = np.array([len(c) for c in cfg.us_cities], dtype=np.int64)
        self._states = pa.array(list(cfg.us_states), pa.string())
        self._state_lens = np.array([len(s) for s in cfg.us_states], dtype=np.int64)

    # ------------------------------------------------------------- numbering
    def _global(self, k: np.ndarray | int) -> np.ndarray | int:
        """The event number (before ``first.event.number``) of this type's ``k``-th event."""
        return (k // self.proportion) * self.cfg.denominator + self.before + k % self.proportion

    def _count_below(self, n: int) -> int:
        """How many events of this type have an event number below ``n``."""
        if n <= 0:
            return 0
        full, rest = divmod(n, self.cfg.denominator)
        return full * self.proportion + min(max(rest - self.before, 0), self.proportion)

    def _offsets_below(self, split: int, k_count: int) -> int:
        """How many offsets of ``split`` address type indices below ``k_count``."""
        s = self.split_num
        return max(0, (k_count - split + s - 1) // s)

    def end_offset(self, split: int) -> int | None:
        if self.cfg.event_num is None:
            return None
        return self._offsets_below(split, self._count_below(self.cfg.event_num))

    def _gap_ns(self) -> float:
        if self.cfg.use_real_time:
            return self.cfg.inter_event_delay_us * 1000.0
        return float(self.cfg.min_event_gap_ns)

    def due_offset(self, split: int, start_offset: int, elapsed: float) -> int | None:
        gap = self._gap_ns()
        if gap <= 0:
            return None
        start = int(self._global(split + self.split_num * start_offset))
        limit = start + int(elapsed * 1e9 / gap)
        return max(start_offset, self._offsets_below(split, self._count_below(limit + 1)))

    def due_time(self, split: int, start_offset: int, offset: int) -> float:
        gap = self._gap_ns()
        start = int(self._global(split + self.split_num * start_offset))
        n = int(self._global(split + self.split_num * offset))
        return (n - start) * gap / 1e9

    # --------------------------------------------------------------- reading
    def read(self, split: int, offset: int, count: int, columns: list[str]) -> ReadBatch:
        end = self.end_offset(split)
        if end is not None:
            count = max(0, min(count, end - offset))
        k = split + self.split_num * (offset + np.arange(count, dtype=np.int64))
        n = self._global(k)
        assert isinstance(n, np.ndarray)
        event = self.cfg.first_event_number + n
        values = _Event(self, event)
        arrays = []
        for name in columns:
            if name == ROW_ID_COLUMN:
                arrays.append(pa.array(n, pa.int64()))
            else:
                arrays.append(getattr(values, f"{self.cfg.table_type.lower()}_{name}")())
        return ReadBatch(pa.Table.from_arrays(arrays, names=columns), offset + count)


class _Event:
    """The values of a vector of events of one type (computed on demand)."""

    def __init__(self, conn: NexmarkConnector, event_number: np.ndarray) -> None:
        self.c = conn
        self.cfg = conn.cfg
        self.number = event_number
        self.id = self.cfg.first_event_id + event_number
        self.d = Draws(self.id)
        self._channels: pa.Array | None = None

    # -------------------------------------------------------------- helpers
    def timestamp_ms(self, number: np.ndarray) -> np.ndarray:
        delay = self.cfg.inter_event_delay_us
        return self.cfg.base_time_ms + np.round(number * delay / 1000.0).astype(np.int64)

    def _ts(self, ms: np.ndarray) -> pa.Array:
        return pa.array(ms * 1000, pa.int64()).cast(pa.timestamp("us"))

    def person_last_id(self) -> np.ndarray:
        cfg = self.cfg
        epoch, off = np.divmod(self.id, cfg.denominator)
        return epoch * cfg.person_proportion + np.minimum(off, cfg.person_proportion - 1)

    def auction_last_id(self) -> np.ndarray:
        cfg = self.cfg
        epoch, off = np.divmod(self.id, cfg.denominator)
        pp, pa_ = cfg.person_proportion, cfg.auction_proportion
        before = off < pp
        epoch = np.where(before, epoch - 1, epoch)
        off = np.where(before | (off >= pp + pa_), pa_ - 1, off - pp)
        return epoch * pa_ + off

    def person_next_id(self, draw: int) -> np.ndarray:
        people = self.person_last_id() + 1
        active = np.minimum(people, self.cfg.active_people)
        return people - active + self.d.below(draw, active + self.cfg.person_id_lead)

    def auction_next_id(self, draw: int) -> np.ndarray:
        top = self.auction_last_id()
        low = np.maximum(top - self.cfg.in_flight_auctions, 0)
        return low + self.d.below(draw, top - low + 1 + self.cfg.auction_id_lead)

    def price(self, draw: int) -> np.ndarray:
        return np.round(10.0 ** (self.d.unit(draw) * 6.0) * 100.0).astype(np.int64)

    def extra(self, current: np.ndarray | int, average: int) -> pa.Array:
        """Random letters padding the event to ``average`` bytes on average."""
        n = len(self.id)
        desired = average - np.broadcast_to(np.asarray(current, dtype=np.int64), (n,))
        delta = (desired + 2) // 5
        size = desired - delta + self.d.below(_D_EXTRA_LEN, np.maximum(2 * delta, 1))
        size = np.where(desired < 0, 0, np.where(delta == 0, desired, size))
        return pool_strings(LOWER_POOL, self.d.u64(_D_EXTRA_POS), size)

    def letters(self, draw: int, length: int) -> pa.Array:
        return pool_strings(LOWER_POOL, self.d.u64(draw), length)

    # --------------------------------------------------------------- person
    def person_id(self) -> pa.Array:
        return pa.array(self.person_last_id() + self.cfg.first_person_id, pa.int64())

    def _name_index(self) -> np.ndarray:
        cfg = self.cfg
        first = self.d.below(_D_NAME1, len(cfg.first_names))
        return first * len(cfg.last_names) + self.d.below(_D_NAME2, len(cfg.last_names))

    def person_name(self) -> pa.Array:
        return self.c._names.take(pa.array(self._name_index()))

    def person_email_address(self) -> pa.Array:
        n = len(self.id)
        m = np.empty((n, 17), dtype=np.uint8)
        room = len(LOWER_POOL) - 8
        a = (self.d.u64(_D_EMAIL1) % np.uint64(room)).astype(np.int64)
        b = (self.d.u64(_D_EMAIL2) % np.uint64(room)).astype(np.int64)
        m[:, 0:7] = LOWER_POOL[a[:, None] + np.arange(7)]
        m[:, 7] = ord("@")
        m[:, 8:13] = LOWER_POOL[b[:, None] + np.arange(5)]
        m[:, 13:17] = np.frombuffer(b".com", dtype=np.uint8)
        return fixed_width_strings(m)

    def person_credit_card(self) -> pa.Array:
        n = len(self.id)
        m = np.full((n, 19), ord(" "), dtype=np.uint8)
        powers = np.array([1000, 100, 10, 1], dtype=np.int64)
        for g in range(4):
            group = self.d.below(_D_CARD + 100 * g, 10000)
            m[:, 5 * g : 5 * g + 4] = (group[:, None] // powers) % 10 + ord("0")
        return fixed_width_strings(m)

    def _city_index(self) -> np.ndarray:
        return self.d.below(_D_CITY, len(self.cfg.us_cities))

    def _state_index(self) -> np.ndarray:
        return self.d.below(_D_STATE, len(self.cfg.us_states))

    def person_city(self) -> pa.Array:
        return self.c._cities.take(pa.array(self._city_index()))

    def person_state(self) -> pa.Array:
        return self.c._states.take(pa.array(self._state_index()))

    def person_date_time(self) -> pa.Array:
        return self._ts(self.timestamp_ms(self.number))

    def person_extra(self) -> pa.Array:
        c = self.c
        current = (
            8 + c._name_lens[self._name_index()] + 17 + 19
            + c._city_lens[self._city_index()] + c._state_lens[self._state_index()]
        )  # fmt: skip
        return self.extra(current, self.cfg.avg_person_byte_size)

    # -------------------------------------------------------------- auction
    def auction_id(self) -> pa.Array:
        return pa.array(self.auction_last_id() + self.cfg.first_auction_id, pa.int64())

    def auction_item_name(self) -> pa.Array:
        return self.letters(_D_ITEM, 20)

    def auction_description(self) -> pa.Array:
        return self.letters(_D_DESC, 100)

    def auction_initial_bid(self) -> pa.Array:
        return pa.array(self.price(_D_PRICE1), pa.int64())

    def auction_reserve(self) -> pa.Array:
        return pa.array(self.price(_D_PRICE1) + self.price(_D_PRICE2), pa.int64())

    def auction_date_time(self) -> pa.Array:
        return self._ts(self.timestamp_ms(self.number))

    def auction_expires(self) -> pa.Array:
        cfg = self.cfg
        now = self.timestamp_ms(self.number)
        ahead = cfg.in_flight_auctions * cfg.denominator // cfg.auction_proportion
        horizon = self.timestamp_ms(self.number + ahead) - now
        length = 1 + (self.d.u64(_D_EXPIRES) % np.maximum(horizon * 2, 1).astype(np.uint64))
        return self._ts(now + length.astype(np.int64))

    def auction_seller(self) -> pa.Array:
        cfg = self.cfg
        hot = self.d.below(_D_HOT, cfg.hot_seller_ratio) > 0
        hot_id = (self.person_last_id() // cfg.hot_seller_ratio_2) * cfg.hot_seller_ratio_2
        seller = np.where(hot, hot_id, self.person_next_id(_D_NEXT))
        return pa.array(seller + cfg.first_person_id, pa.int64())

    def auction_category(self) -> pa.Array:
        cfg = self.cfg
        return pa.array(
            cfg.first_category_id + self.d.below(_D_CATEGORY, cfg.num_categories), pa.int64()
        )

    def auction_extra(self) -> pa.Array:
        return self.extra(8 + 20 + 100 + 8 * 5, self.cfg.avg_auction_byte_size)

    # ------------------------------------------------------------------ bid
    def bid_auction(self) -> pa.Array:
        cfg = self.cfg
        hot = self.d.below(_D_HOT, cfg.hot_auction_ratio) > 0
        hot_id = (self.auction_last_id() // cfg.hot_auction_ratio_2) * cfg.hot_auction_ratio_2
        auction = np.where(hot, hot_id, self.auction_next_id(_D_NEXT))
        return pa.array(auction + cfg.first_auction_id, pa.int64())

    def bid_bidder(self) -> pa.Array:
        cfg = self.cfg
        hot = self.d.below(_D_HOT2, cfg.hot_bidder_ratio) > 0
        hot_id = (self.person_last_id() // cfg.hot_bidder_ratio_2) * cfg.hot_bidder_ratio_2 + 1
        bidder = np.where(hot, hot_id, self.person_next_id(_D_NEXT2))
        return pa.array(bidder + cfg.first_person_id, pa.int64())

    def bid_price(self) -> pa.Array:
        return pa.array(self.price(_D_PRICE1), pa.int64())

    def _channel_index(self) -> pa.Array:
        """Into ``_channel_map()``: a hot channel, or one of the 10,000 others."""
        if self._channels is None:
            hot = self.d.below(_D_CHANNEL_HOT, self.cfg.hot_channel_ratio) > 0
            index = np.where(
                hot,
                _CHANNELS + self.d.below(_D_CHANNEL, len(_HOT_CHANNELS)),
                self.d.below(_D_CHANNEL, _CHANNELS),
            )
            self._channels = pa.array(index)
        return self._channels

    def bid_channel(self) -> pa.Array:
        return _channel_map()[0].take(self._channel_index())

    def bid_url(self) -> pa.Array:
        return _channel_map()[1].take(self._channel_index())

    def bid_date_time(self) -> pa.Array:
        return self._ts(self.timestamp_ms(self.number))

    def bid_extra(self) -> pa.Array:
        return self.extra(8 * 4, self.cfg.avg_bid_byte_size)
