"""Each GPU (and node) against its peers on one metric: stragglers, nodes behind the others as a whole, and GPUs
whose samples are unstable where their peers' are not. Pure: numbers in, Findings out.

Three rules, each with the spec's two knobs (`certify.stragglers`: `maxDeviation`, `minZ`):

- **straggler** (`straggler.<metric>`, per GPU): its figure (the median of its samples) is more than
  `maxDeviation` behind the median of its peers on the node, or of its peers in the fleet, AND stands out of
  their spread by a robust z of `minZ`, raised with the number of figures compared so that a healthy fleet of
  any size is as unlikely to show one (`bar`). The node comparison takes its spread from every node's GPUs at
  once (each GPU against its own node's others, pooled over the fleet): the MAD of seven peers is too unsteady
  to hold a z to.
- **node-level straggler** (`straggler.<metric>`, gpu null): the median of the node's GPUs is behind the other
  nodes' by its statistics: a z against the nodes' spread (`stats.node_spread`, pooled over the pool's per-GPU
  metrics unless this one's is larger by an F-test) beyond the bar for the nodes compared, widened to Student's t
  for the spread's degrees of freedom; or, as before, beyond
  `maxDeviation` and out of their MAD. A node's figure is a median of eight boards, a few times steadier than one
  board: a 4% slow node stands out where the 5% gate alone hid it. One slow node is one finding, not one per GPU.
- **stability** (`stability.<metric>`): a sample is slow when it is more than `maxDeviation` below the GPU's own
  median; a GPU is unstable when its slow samples are more, and deeper, than a healthy GPU's would be among its
  peers': the exact chance that its samples hold so many of the pool's deepest (rules/stability.py weighs count
  and depth), times the number of GPUs compared, below the one-sided normal tail of `minZ`. The median hides
  slowness in fewer than half the samples; this does not. Healthy GPUs show a slow sample now and then, and a
  fleet of hundreds shows a rare one somewhere: hence the peers' own samples, and the count of GPUs, in the test.

Who a GPU's (or node's) peers are is decided in one place, `PeerIndex.pool_of`: today the whole fleet; pools of
nodes plug in there. A comparison with fewer peers than `MIN_PEERS` is not made, and says so (`undecided`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from statistics import NormalDist

import numpy as np

from gpucert.evaluate.rules.performance import Sampled
from gpucert.evaluate.rules.stability import (
    MIN_SLOW_SAMPLES,
    Rules,
    SlowSamples,
    TailPool,
    judge_stability,
    slow_samples,
    unstable,
)
from gpucert.evaluate.rules.stragglers_told import MIN_PEERS, node_medians, node_residuals, quiet_keys
from gpucert.evaluate.rules.stragglers_undecided import COMPARISONS, Undecided, undecided_of
from gpucert.evaluate.stats import (
    MAD_TO_SIGMA,
    Summary,
    binomial_tail,
    median,
    node_spread,
    relative_spread,
    summarize,
    t_quantile,
    tail_z,
)
from gpucert.plan.checks import CheckStatus, Finding

__all__ = ["COMPARISONS", "FLEET", "MIN_PEERS", "MIN_SLOW_SAMPLES", "PeerIndex", "Rules", "Undecided", "binomial_tail"]
__all__ += ["tail_z"]

Key = tuple[str, int | None]  # (node, gpu); gpu None for a node-level metric
FLEET = "fleet"


def _where(key: Key) -> str:
    return key[0] if key[1] is None else f"{key[0]}/gpu{key[1]}"


class PeerIndex:
    """One metric across the fleet, summarised once; judges each GPU (or node) against its peers."""

    def __init__(
        self,
        metric: str,
        values: Mapping[Key, Sampled],
        rules: Rules,
        *,
        samples: Mapping[Key, Sequence[float]] | None = None,
        slow: Mapping[Key, SlowSamples] | None = None,
        pool_of: Callable[[str], str] | None = None,
        others: Callable[[str], Sequence[tuple[float, int]]] | None = None,
    ) -> None:
        self.metric = metric
        self.values = values
        self.rules = rules
        self.sign = 1.0 if rules.higher_is_better else -1.0
        self._pool_of = pool_of
        self._pool_by_node: dict[str, str] = {}  # pool_of's answers: asked several times by every check
        self._bars: dict[int, float] = {}
        self._node_bars: dict[tuple[int, int], float] = {}
        self._others = others  # a pool -> the other metrics' `relative_spread`s of its nodes, to pool with
        self.pools: dict[str, list[Key]] = defaultdict(list)
        self.by_node: dict[str, list[Key]] = defaultdict(list)
        for key in values:
            self.by_node[key[0]].append(key)
        pools = {node: self.pool_of(node) for node in self.by_node}  # asked once a node, not once a GPU
        self._one_pool = len(set(pools.values())) == 1  # as PeerComparisons builds every index: its pool's
        if self._one_pool:
            self.pools[next(iter(pools.values()))] = list(values)
        else:
            for key in values:
                self.pools[pools[key[0]]].append(key)
        self.per_gpu = any(k[1] is not None for k in values)
        self.fleet: dict[str, Summary] = {p: summarize([values[k].value for k in ks]) for p, ks in self.pools.items()}
        self._residuals = node_residuals(values, self.by_node)
        self._node_level: dict[str, Finding | None] = {}
        self._pool_summaries: dict[str, tuple[list[float], Summary]] = {}
        self._spreads: dict[str, tuple[float, int]] = {}
        self._within = self._within_node_spread()
        self._nodes = self._node_figures()
        # each GPU's slow samples: given (`slow`, as `slow_samples` tells them), or told here from its `samples`
        self._slow: dict[Key, SlowSamples] = {k: s for k, s in (slow or {}).items() if k in values}
        for k, v in (samples or {}).items():
            if k in values and (s := slow_samples(v, self.sign, rules.max_deviation)) is not None:
                self._slow[k] = s
        self._quiet: dict[bool, set[Key]] = {}
        self._tails: dict[str, TailPool] = defaultdict(TailPool)
        members: dict[str, list[SlowSamples]] = defaultdict(list)
        for k, s in self._slow.items():
            members[pools[k[0]]].append(s)
        for pool, slows in members.items():
            self._tails[pool].add_all(slows)

    # ---- who the peers are: the one place pools plug in -------------------------------------------------------

    def pool_of(self, node: str) -> str:
        """The group of nodes a node is compared with: the whole fleet unless the caller says otherwise."""
        pool = self._pool_by_node.get(node)
        if pool is None:
            pool = self._pool_by_node[node] = self._pool_of(node) if self._pool_of is not None else FLEET
        return pool

    def peers_of(self, key: Key) -> list[Key]:
        """The GPUs (or nodes, for a node-level metric) `key` is compared with in the fleet: its pool, less itself."""
        return [k for k in self.pools[self.pool_of(key[0])] if k != key]

    def _peer_count(self, key: Key) -> int:
        """How many peers `peers_of(key)` names, without listing them (a fleet of thousands asks for every GPU)."""
        return len(self.pools[self.pool_of(key[0])]) - (1 if key in self.values else 0)

    def node_peers_of(self, key: Key) -> list[Key]:
        """The other GPUs of the GPU's own node."""
        return [k for k in self.by_node[key[0]] if k != key] if key[1] is not None else []

    # ---- summaries, once per metric ---------------------------------------------------------------------------

    def node_zs(self) -> dict[Key, float]:
        """`node_z` of every GPU that has one, worse negative (times `sign`): what `straggler.combined` combines."""
        out: dict[Key, float] = {}
        for pool, within in self._within.items():  # Summary.z of each residual of the pool, by arrays
            keys = [k for k in self._residuals if self._pool_by_node[k[0]] == pool]  # told in __init__
            r = np.array([self._residuals[k] for k in keys], dtype=np.float64)
            sigma = within.mad * MAD_TO_SIGMA
            with np.errstate(all="ignore"):
                z = (
                    (r - within.median) / sigma
                    if sigma
                    else np.where(r == within.median, 0.0, np.copysign(np.inf, r - within.median))
                )
            out.update(zip(keys, (self.sign * z).tolist(), strict=True))
        return {k: out[k] for k in self.values if k in out}

    def _within_node_spread(self) -> dict[str, Summary]:
        """Per pool, every GPU's residual against its own node's others: their median and MAD."""
        out: dict[str, list[float]] = defaultdict(list)
        if self._one_pool and self._residuals:
            out[next(iter(self.pools))] = list(self._residuals.values())
        else:
            for key, r in self._residuals.items():
                out[self._pool_by_node[key[0]]].append(r)  # every node's pool told in __init__
        return {p: summarize(rs) for p, rs in out.items() if len(rs) > MIN_PEERS}

    def _node_figures(self) -> dict[str, float]:
        """Each node's figure: the median of its GPUs' figures (per-GPU metrics only)."""
        if not self.per_gpu:
            return {}
        return node_medians(self.values, self.by_node)

    def residual(self, key: Key) -> float | None:
        """How far the GPU is from the median of its node's others (relative), None with too few of them."""
        return self._residuals.get(key)

    def within(self, pool: str) -> Summary | None:
        """The pool's residuals' median and MAD (None with too few): what a GPU's node z is against."""
        return self._within.get(pool)

    def slow(self, key: Key) -> SlowSamples | None:
        return self._slow.get(key)

    def tails(self, pool: str) -> TailPool:
        return self._tails[pool]

    def quiet(self, key: Key, *, stability: bool) -> bool:
        """Whether `judge` passes the key, its stability (where judged) passes, and `notes` says nothing: its check
        is its baseline's finding (rules/stragglers_told.py tells every key at once)."""
        if stability not in self._quiet:
            self._quiet[stability] = quiet_keys(self, stability=stability)
        return key in self._quiet[stability]

    def node_z(self, key: Key) -> float | None:
        """The GPU's robust z against its own node's others (their spread pooled over its pool), None untold."""
        r, within = self._residuals.get(key), self._within.get(self.pool_of(key[0]))
        return None if r is None or within is None else within.z(r)

    # ---- the rules --------------------------------------------------------------------------------------------

    def bar(self, compared: int) -> float:
        """The robust z a figure must reach when `compared` figures are held to the same peers: `minZ` for one,
        higher for more, so that the chance that any of a healthy fleet's figures reaches it stays that of one
        figure reaching `minZ` (a fleet of thousands has a -4 sd board somewhere; it is no straggler)."""
        bar = self._bars.get(compared)
        if bar is None:
            bar = self._bars[compared] = max(
                self.rules.min_z, tail_z(NormalDist().cdf(-self.rules.min_z) / max(compared, 1))
            )
        return bar

    def _behind(self, deviation: float, z: float, compared: int) -> bool:
        return self.sign * deviation < -self.rules.max_deviation and self.sign * z < -self.bar(compared)

    def _word(self) -> str:
        return "below" if self.sign > 0 else "above"

    def notes(self, key: Key, *, stability: bool) -> list[str]:
        """The comparisons of `key` not made for too few peers, said plainly (a pass must not be silent on them)."""
        out = []
        if key[1] is not None and (self._residuals.get(key) is None or self.pool_of(key[0]) not in self._within):
            out.append(
                f"not compared with its node's peers: {len(self.node_peers_of(key))}, the rule needs {MIN_PEERS}"
            )
        others = self._peer_count(key)
        if others < MIN_PEERS:
            what = "GPUs" if key[1] is not None else "nodes"
            out.append(
                f"not compared with the {self.pool_of(key[0])}: {others} other {what}, the rule needs {MIN_PEERS}"
            )
        if stability and not self.stability_told(key):
            out.append(f"stability not judged: {others} peers with samples, the rule needs {MIN_PEERS}")
        return out

    def _behind_on(self, key: Key) -> tuple[float | None, float | None]:
        """The GPU's robust z against its node's others and against its pool, each where it is behind on it (None
        where it is not, or the comparison is not made): what `judge` words."""
        pool = self.pool_of(key[0])
        r = self._residuals.get(key)
        within = self._within.get(pool)
        node_z = None
        if key[1] is not None and r is not None and within is not None:
            z = within.z(r)
            node_z = z if self._behind(r - within.median, z, within.n) else None
        fleet_z = None
        if self._peer_count(key) >= MIN_PEERS:
            fleet = self.fleet[pool]
            value = self.values[key].value
            z = fleet.z(value)
            fleet_z = z if self._behind(value / fleet.median - 1, z, fleet.n) else None
        return node_z, fleet_z

    def behind(self, key: Key) -> bool:
        """Whether `judge` fails the GPU, without wording it (a check words one finding of the several it weighs)."""
        return self._behind_on(key) != (None, None)

    def judge(self, key: Key) -> Finding:
        """Pass, or `straggler.<metric>` failing: by how much, against whom, on how many samples. A pass says
        which comparison could not be made for too few peers."""
        check = f"straggler.{self.metric}"
        s = self.values[key]
        reasons: list[str] = []
        node_z, fleet_z = self._behind_on(key)
        if node_z is not None:
            r, within = self._residuals[key], self._within[self.pool_of(key[0])]
            peers = self.node_peers_of(key)
            ref = median([self.values[k].value for k in peers])
            reasons.append(
                f"{abs(r):.1%} {self._word()} the median of its {len(peers)} peers on {key[0]} "
                f"({ref:.4g} {s.unit}; robust z {node_z:.1f} against the spread of every GPU from its own node's "
                f"others, beyond {self.bar(within.n):.1f} for any of {within.n} GPUs)"
            )
        fleet = self.fleet[self.pool_of(key[0])]
        what = "GPUs" if key[1] is not None else "nodes"
        if fleet_z is not None:
            deviation = s.value / fleet.median - 1
            reasons.append(
                f"{abs(deviation):.1%} {self._word()} the {self.pool_of(key[0])} median over {fleet.n} {what} "
                f"({fleet.median:.4g} {s.unit}, robust z {fleet_z:.1f}, beyond {self.bar(fleet.n):.1f} for any of them)"
            )
        if not reasons:
            message = f"{_where(key)} {self.metric} {s.value:.4g} {s.unit} is in line with its peers"
            return Finding(
                check,
                CheckStatus.PASS,
                key[0],
                key[1],
                "; ".join([message, *self.notes(key, stability=False)]),
                observed=s.value,
                expected=round(fleet.median, 4),
                unit=s.unit,
            )
        msg = (
            f"{_where(key)} {self.metric} {s.value:.4g} {s.unit} (median of {s.n} samples) is "
            + " and ".join(reasons)
            + f"; limit {self.rules.max_deviation:.1%} and minZ {self.rules.min_z:g}"
        )
        return Finding(
            check,
            CheckStatus.FAIL,
            key[0],
            key[1],
            msg,
            observed=round(s.value, 4),
            expected=round(fleet.median, 4),
            unit=s.unit,
            limit=round(fleet.median * (1 - self.sign * self.rules.max_deviation), 4),
        )

    def node_level(self, node: str) -> Finding | None:
        """The node as a whole against the other nodes (per-GPU metrics): pass, fail naming each of its GPUs'
        figures, or None when the node has no figure or too few other nodes have one (see `undecided`)."""
        if node not in self._node_level:
            self._node_level[node] = self._judge_node(node)
        return self._node_level[node]

    def _pool_nodes(self, pool: str) -> tuple[list[float], Summary]:
        """The figures of the pool's nodes (each node's median) and their summary: every node of the pool is held
        to the same, itself included."""
        if pool not in self._pool_summaries:
            figures = [v for n, v in self._nodes.items() if self.pool_of(n) == pool]
            self._pool_summaries[pool] = (figures, summarize(figures))
        return self._pool_summaries[pool]

    def _pool_spread(self, pool: str) -> tuple[float, int]:
        """The spread of the pool's node figures and its degrees of freedom (stats.node_spread), once per pool: each
        node asked it again over every node (at 1,024 nodes most of a re-test's controller time)."""
        if pool not in self._spreads:
            figures, nodes = self._pool_nodes(pool)
            within = self._within.get(pool)
            boards = int(median([len(ks) for n, ks in self.by_node.items() if self.pool_of(n) == pool]))
            board_sigma = within.mad * MAD_TO_SIGMA if within is not None else 0.0
            others = self._others(pool) if self._others is not None else ()
            self._spreads[pool] = node_spread(figures, nodes, board_sigma, boards, others)
        return self._spreads[pool]

    def relative_spread(self, pool: str) -> tuple[float, int]:
        """`stats.relative_spread` of the pool's node figures: what the pool's other metrics pool with theirs."""
        return relative_spread(*self._pool_nodes(pool)) if self.per_gpu and pool in self.pools else (0.0, 0)

    def node_bar(self, compared: int, df: int) -> float:
        """`bar(compared)` for a spread estimated from df + 1 nodes: the same tail of Student's t (a few dozen
        nodes' spread is itself uncertain: the normal bar would flag clean fleets)."""
        bar = self._node_bars.get((compared, df))
        if bar is None:  # every node of a pool asks with the same counts
            tail = NormalDist().cdf(-self.rules.min_z) / max(compared, 1)  # df capped: t is the normal by then
            bar = self._node_bars[(compared, df)] = max(self.bar(compared), t_quantile(tail, min(df, 1000)))
        return bar

    def _judge_node(self, node: str) -> Finding | None:
        check = f"straggler.{self.metric}"
        mine = self._nodes.get(node)
        if mine is None:
            return None
        figures, nodes = self._pool_nodes(self.pool_of(node))
        if len(figures) - 1 < MIN_PEERS:
            return None
        deviation = mine / nodes.median - 1
        sigma, df = self._pool_spread(self.pool_of(node))
        z = (mine - nodes.median) / sigma if sigma > 0 else math.copysign(math.inf, deviation) if deviation else 0.0
        bar = self.node_bar(len(figures), df)
        # far behind (beyond maxDeviation, and out of the MAD's spread) is behind whatever the nodes' spread says:
        # a handful of nodes cannot estimate their spread well enough for the statistics alone
        behind = self.sign * z < -bar or self._behind(deviation, nodes.z(mine), len(figures))
        keys = sorted(self.by_node[node], key=lambda k: k[1] or 0)
        unit = self.values[keys[0]].unit
        if not behind:
            return Finding(
                check,
                CheckStatus.PASS,
                node,
                None,
                f"{node} {self.metric}: its {len(keys)} GPUs' median {mine:.4g} {unit} is in line with the "
                f"{len(figures)} nodes' median {nodes.median:.4g} {unit}",
                observed=round(mine, 4),
                expected=round(nodes.median, 4),
                unit=unit,
            )
        gpus = ", ".join(f"gpu{k[1]} {self.values[k].value:.4g}" for k in keys)
        n = sorted({self.values[k].n for k in keys})
        message = (
            f"{node} {self.metric}: the median of its {len(keys)} GPUs, {mine:.4g} {unit}, is {abs(deviation):.1%} "
            f"{self._word()} the median over {len(figures)} nodes ({nodes.median:.4g} {unit}, z {z:.1f} against the "
            f"nodes' spread sd {sigma:.4g} {unit} on {df} degrees of freedom, bar {bar:.1f} for any of them; robust z "
            f"{nodes.z(mine):.1f}); the node as a whole is behind: its GPUs {gpus} {unit} (medians of "
            f"{'/'.join(map(str, n))} samples each); limit {self.rules.max_deviation:.1%} or the bar, minZ "
            f"{self.rules.min_z:g}"
        )
        return Finding(
            check,
            CheckStatus.FAIL,
            node,
            None,
            message,
            observed=round(mine, 4),
            expected=round(nodes.median, 4),
            unit=unit,
            limit=round(nodes.median - self.sign * min(bar * sigma, self.rules.max_deviation * nodes.median), 4),
        )

    def stability_told(self, key: Key) -> bool:
        """Whether `stability` judges the GPU (its samples were given and it has peers enough), without judging it."""
        mine = self._slow.get(key)
        return mine is not None and self._tails[self.pool_of(key[0])].members - 1 >= MIN_PEERS

    def unstable(self, key: Key) -> bool:
        """Whether `stability` fails the GPU, without wording it."""
        return self.stability_told(key) and unstable(self._slow[key], self._tails[self.pool_of(key[0])], self.rules)

    def stability(self, key: Key) -> Finding | None:
        """`stability.<metric>`: pass or fail on the count and depth of the GPU's slow samples against its peers'
        (rules/stability.py words it); None when the GPU's samples were not given or it has too few peers."""
        if not self.stability_told(key):
            return None
        return judge_stability(
            f"stability.{self.metric}",
            key,
            self._slow[key],
            self._tails[self.pool_of(key[0])],
            self.rules,
            self.values[key].unit,
        )

    # ---- what the verdict says beside the checks ---------------------------------------------------------------

    def fleet_median(self) -> Summary | None:
        """Every GPU's (or node's) figure at once, all pools together: what is held against the SKU figure."""
        return summarize([s.value for s in self.values.values()]) if self.values else None

    def undecided(self, *, stability: bool) -> list[Undecided]:
        """The comparisons this index cannot make for too few peers, grouped by reason."""
        return undecided_of(self, stability=stability)
