"""Acting with the published acting graph (learner/acting_graph.py) in ONNX Runtime, on this
process's CPU: the network collectors and the evaluator act with is the plug-in's own torch module,
exported by the learner, and the process never imports torch.

Why not torch here: a torch import is over a second of CPU, and on a 2-core laptop four processes
importing it at once held the first env step and the learner's first update until 7 s after
`raypex train`; ONNX Runtime imports in 0.1 s. Per call on a collector's batch it is as fast as a
hand-written numpy forward was on MLPs and faster than eager torch on CNNs (the module docstring
of learner/acting_graph.py has the figures).

Until the first weights arrive there is no graph: the policies act at random (the replay warm-up).
"""

from __future__ import annotations

import numpy as np

from raypex.replay.contracts import SEPARATOR, Weights, batch_size, fields

DATA_INPUTS = ("obs", "state")  # the graph's inputs that are not published arrays
_NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_,
                "tensor(int64)": np.int64, "tensor(double)": np.float64}


_sessions: dict[bytes, object] = {}  # each acting graph's session, built once in this process


def session_for(graph: bytes):
    """The ONNX Runtime session of `graph`, built on first use in this process (a collector's host
    asks for it on the thread that receives weights: cluster/hosts/collector_actor.py)."""
    session = _sessions.get(graph)
    if session is None:
        session = _sessions[graph] = _session(graph)
    return session


def _session(graph: bytes):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # One thread, as a collector's torch was: a node runs as many collectors as it has cores.
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only: its notes on graph rewrites are not the user's business
    return onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])


class GraphForward:
    """The acting graph fed the newest published arrays, run on numpy batches."""

    form = "onnx"  # what acts, in words (a policy's form)

    def __init__(self):
        self.session = None  # none until the first weights arrive
        self._graph = b""
        self._parameter_names: list[str] = []
        self._input_types: dict[str, type] = {}
        self._feed: dict[str, np.ndarray] = {}

    @property
    def loaded(self) -> bool:
        return self.session is not None

    def load(self, weights: Weights) -> None:
        """Run these weights from the next call on (a new graph only when it differs: once a run)."""
        if not weights.acting_graph:
            raise ValueError(f"weights version {weights.version} carry no acting graph (learner/acting_graph.py)")
        if weights.acting_graph != self._graph:
            self.session = session_for(weights.acting_graph)
            self._graph = weights.acting_graph
            inputs = self.session.get_inputs()
            data = {i.name for i in inputs if i.name.partition(SEPARATOR)[0] in DATA_INPUTS}  # obs.<key>: a part
            self._parameter_names = [i.name for i in inputs if i.name not in data]
            self._input_types = {i.name: _NUMPY_TYPES[i.type] for i in inputs if i.name in data}
        missing = [name for name in self._parameter_names if name not in weights.arrays]
        if missing:
            raise ValueError(f"weights version {weights.version} lack the acting graph's {', '.join(missing)}")
        self._feed = {name: weights.arrays[name] for name in self._parameter_names}

    def run(self, **data: np.ndarray | dict[str, np.ndarray]) -> list[np.ndarray]:
        """The graph's outputs, in order, for its data inputs (`obs`, one array or parts, and `state`
        where it takes one)."""
        for name, value in data.items():
            for field, array in fields(name, value).items():
                self._feed[field] = np.asarray(array, self._input_types[field])
        return self.session.run(None, self._feed)


class ActsThroughGraph:
    """What acting through the acting graph shares: `graph` runs it (a GraphForward in this
    process, or a ServedForward, actors/served_acting.py: the node's acting server), takes each
    weights version and says the form."""

    precision = "fp32"
    graph: GraphForward

    def use(self, graph=None) -> None:
        """Run the acting graph through `graph`; by default in this process."""
        self.graph = graph or GraphForward()

    @property
    def form(self) -> str:
        """What acts, in words: the acting graph, in this process or on the node's acting server."""
        return self.graph.form

    def load(self, weights: Weights) -> None:
        """Act with these weights from the next call on."""
        self.graph.load(weights)


class GraphQ(ActsThroughGraph):
    """Q-values and greedy actions of a Q-network's acting graph (ActingPolicy's interface):
    before the first weights, zeros and uniformly random actions."""

    def __init__(self, num_actions: int, rng: np.random.Generator, graph=None):
        """`graph`: what runs the acting graph (ActsThroughGraph.use)."""
        self.num_actions, self.rng = num_actions, rng
        self.use(graph)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """[B, num_actions] float32 Q-values; zeros before the first weights, so initial priorities
        come from rewards alone."""
        if not self.graph.loaded:
            return np.zeros((batch_size(obs), self.num_actions), np.float32)
        return self.graph.run(obs=obs)[0]

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """The greedy action per row; uniformly random before the first weights."""
        if not self.graph.loaded:
            return self.rng.integers(0, self.num_actions, batch_size(obs))
        return self.graph.run(obs=obs)[0].argmax(axis=1)


def q_acts_with_graph(obs_shape: tuple[int, ...], act_precision: str, act_fusion: str, parts: tuple = ()) -> bool:
    """Whether a Q collector acting on its CPU runs the acting graph without timing it: on flat
    observations, unless a bf16 or fused torch form is asked for explicitly (collectors.act_precision,
    act_fusion), and always on observations in parts (`parts`), which act through the graph alone.
    A CNN's collector times the graph against torch's forms (actors/q_policy.py)."""
    return bool(parts) or (len(obs_shape) == 1 and act_precision in ("auto", "fp32") and act_fusion != "on")
