"""policy.pt2: the greedy Q-network (or a td3/sac actor, giving actions in the env's units, or
r2d2's recurrent Q-network, taking and giving its state) as a torch.export archive that takes one
observation or a batch.

torch.export fixes the rank of an input, so one program cannot take both `[B, *obs_shape]` and
`obs_shape`. The archive holds two programs of the same weights:

- "model", what `torch.export.load("policy.pt2")` returns: float32 `[B, *obs_shape]` -> Q `[B, A]`;
- "one_observation": float32 `obs_shape` -> Q `[A]`.

`load_policy` reads both and chooses by the observation's rank, taking numpy or torch input of
any real dtype (what the env wrappers give: float32 vectors, uint8 frames and images). A policy
of observations in parts (Dict and Tuple envs) takes a dict of them by part key (a Tuple env's
policy takes a tuple too), each part one observation's or a batch's. Plain torch
reads the second program with `torch.export.pt2_archive._package.load_pt2` (a private module of
torch; `obs[None]` through "model" is the public way).
"""

from __future__ import annotations

import io
import json
import re
import threading
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from raypex.replay.contracts import each_part

BATCH_PROGRAM = "model"  # the name torch.export.load reads
ONE_OBSERVATION_PROGRAM = "one_observation"


class _OneObservation(nn.Module):
    """Q-values of a single observation: the batched network on a batch of one."""

    def __init__(self, network: nn.Module):
        super().__init__()
        self.network = network

    def forward(self, obs: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        return self.network(each_part(lambda part: part.unsqueeze(0), obs)).squeeze(0)


class _OneStep(nn.Module):
    """A recurrent policy's step for a single observation and state: the batched step on a batch of one."""

    def __init__(self, network: nn.Module):
        super().__init__()
        self.network = network

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, state = self.network(each_part(lambda part: part.unsqueeze(0), obs), state.unsqueeze(0))
        return q.squeeze(0), state.squeeze(0)


# An extra file of the archive: "q_values" (dqn), "actions" (td3, sac) or "recurrent_q_values"
# (r2d2: (obs, state) -> (Q-values, the next state))
OUTPUTS_FILE = "raypex_outputs"
RECURRENT = "recurrent_q_values"


_warming: threading.Thread | None = None  # warm_exporter's thread, in this process


def warm_exporter() -> None:
    """Start importing what torch.export needs on a thread of its own, and return at once.

    torch.export's first use in a process imports torch._dynamo and sympy, 1.9 s here (later
    exports take 0.15 s). A run's end calls this as the learner stops, so that import runs while the
    last epoch ends and the final evaluation runs. Imports only: an export traced on this thread
    while the learner's own thread still trains or saves could see tracing's patched torch."""
    global _warming
    if _warming is None:
        thread = threading.Thread(target=_import_exporter, name="warm-exporter", daemon=True)
        thread.start()
        _warming = thread  # only once started: an export on the learner's other thread joins it


def _import_exporter() -> None:
    import torch.export._trace  # noqa: F401  (torch._dynamo, sympy)

    try:
        from torch.export.pt2_archive._package import package_pt2  # noqa: F401
    except ImportError:
        pass


def _zeros(obs_shape: tuple[int, ...], parts: tuple, *batch: int):
    """Zero observations (a batch of them with `batch`), one array or parts."""
    if parts:
        return {key: torch.zeros((*batch, *shape)) for key, shape, _ in parts}
    return torch.zeros((*batch, *obs_shape))


def export_policy_archive(network: nn.Module, obs_shape: tuple[int, ...], outputs: str = "q_values",
                          state_size: int = 0, parts: tuple = ()) -> bytes:
    """The bytes of policy.pt2 for `network` (a float32 CPU module in eval mode) whose output is
    `outputs`: Q-values (dqn), actions in the env's units (td3, sac), or, for a recurrent network
    with a state of `state_size` float32s, (Q-values, the next state) of (obs, state); `parts`:
    (key, shape, dtype) of observations in parts, which it then takes. With a torch older than the
    multi-program archive, the batch program alone (`load_policy` still takes one observation; a
    Q-values program is assumed)."""
    if _warming is not None:
        _warming.join()  # Python's import lock would wait too; this says so
    batch = torch.export.Dim("batch", min=1)
    batched_obs = _zeros(obs_shape, parts, 2)
    obs_dims = each_part(lambda _: {0: batch}, batched_obs)
    if state_size:
        batched = torch.export.export(network, (batched_obs, torch.zeros((2, state_size))),
                                      dynamic_shapes=(obs_dims, {0: batch}))
    else:
        batched = torch.export.export(network, (batched_obs,), dynamic_shapes=(obs_dims,))
    buffer = io.BytesIO()
    try:
        from torch.export.pt2_archive._package import package_pt2
    except ImportError:
        if state_size:
            raise RuntimeError("a recurrent policy.pt2 needs torch's multi-program archive (torch 2.9 or newer)")
        torch.export.save(batched, buffer)
        return buffer.getvalue()
    if state_size:
        single = torch.export.export(_OneStep(network), (_zeros(obs_shape, parts), torch.zeros(state_size)))
    else:
        single = torch.export.export(_OneObservation(network), (_zeros(obs_shape, parts),))
    package_pt2(buffer, exported_programs={BATCH_PROGRAM: batched, ONE_OBSERVATION_PROGRAM: single},
                extra_files={OUTPUTS_FILE: outputs})
    return buffer.getvalue()


class ExportedPolicy:
    """A loaded policy.pt2: Q-values and greedy actions of one observation or a batch.

    Observations are in the network's layout (`obs_shape`, or a batch of them) and of any real
    dtype; they are converted to float32 as the collectors' networks see them. Observations in
    parts: `obs_shape` is each part's shape by key, and an observation a dict of parts (or, for a
    Tuple env's, a tuple).
    """

    def __init__(self, batched: nn.Module, single: nn.Module, obs_shape: tuple[int, ...] | dict[str, tuple[int, ...]],
                 outputs: str = "q_values", state_size: int = 0):
        self._batched, self._single = batched, single
        self.obs_shape = obs_shape  # one observation's shape (of each part), as the network takes it
        self.outputs = outputs  # "q_values" (dqn), "actions" (td3, sac: in the env's units) or RECURRENT (r2d2)
        self.state_size = state_size  # a recurrent policy's state: float32s per observation (0: none)

    @property
    def recurrent(self) -> bool:
        """Whether the policy carries a state from step to step (pass it in and take the next one back)."""
        return self.state_size > 0

    def initial_state(self, batch: int | None = None) -> torch.Tensor:
        """A recurrent policy's state at an episode's start: `[state_size]`, or `[batch, state_size]`."""
        if not self.recurrent:
            raise ValueError("this policy.pt2 has no state: call act(obs) and q_values(obs) without one")
        return torch.zeros(self.state_size if batch is None else (batch, self.state_size))

    def __call__(self, obs: np.ndarray | torch.Tensor, state: torch.Tensor | None = None):
        """The programs' output: Q-values, actions for a td3/sac policy, (Q-values, next state) for a recurrent one."""
        return self._run(obs, state)

    def q_values(self, obs: np.ndarray | torch.Tensor, state: torch.Tensor | None = None):
        """Q `[A]` for one observation, `[B, A]` for a batch; a recurrent policy takes its state
        and returns (Q-values, the next state)."""
        if self.outputs == "actions":
            raise ValueError("this policy.pt2 is a td3/sac actor: it gives actions (act), not Q-values")
        return self._run(obs, state)

    def _run(self, obs: np.ndarray | torch.Tensor, state: torch.Tensor | None):
        if self.recurrent != (state is not None):
            raise ValueError("this policy.pt2 is recurrent: pass its state, policy.initial_state() at an episode's "
                             "start, then the one each call returns" if self.recurrent else
                             "this policy.pt2 has no state: call it with the observation alone")
        if isinstance(self.obs_shape, dict):
            return self._run_parts(obs, state)
        tensor = _real(obs)
        inputs = (tensor,) if state is None else (tensor, torch.as_tensor(state, dtype=torch.float32))
        with torch.inference_mode():
            if tuple(tensor.shape) == self.obs_shape:
                return self._single(*inputs)
            if tensor.dim() == len(self.obs_shape) + 1 and tuple(tensor.shape[1:]) == self.obs_shape:
                return self._batched(*inputs)
        raise ValueError(f"policy.pt2 takes one observation of shape {list(self.obs_shape)} or a batch "
                         f"[B, {', '.join(map(str, self.obs_shape))}], got {list(tensor.shape)}")

    def _run_parts(self, obs, state: torch.Tensor | None):
        shapes = self.obs_shape
        if isinstance(obs, (tuple, list)):  # a Tuple env's observation: its parts in order
            obs = {str(i): part for i, part in enumerate(obs)}
        expected = "{" + ", ".join(f"{key}: {list(shape)}" for key, shape in shapes.items()) + "}"
        if not isinstance(obs, dict) or set(obs) != set(shapes):
            got = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
            raise ValueError(f"policy.pt2 takes observations in parts {expected} (one observation's, or a batch's "
                             f"with a batch axis first), got {got}")
        parts = {key: _real(obs[key]) for key in shapes}
        one = all(tuple(parts[key].shape) == shape for key, shape in shapes.items())
        batch = {len(part) for part in parts.values() if part.dim()}
        many = len(batch) == 1 and all(tuple(parts[key].shape[1:]) == shape for key, shape in shapes.items())
        if not (one or many):
            got = "{" + ", ".join(f"{key}: {list(part.shape)}" for key, part in parts.items()) + "}"
            raise ValueError(f"policy.pt2 takes observations in parts {expected} (one observation's, or a batch's "
                             f"with a batch axis first), got {got}")
        inputs = (parts,) if state is None else (parts, torch.as_tensor(state, dtype=torch.float32))
        with torch.inference_mode():
            return self._single(*inputs) if one else self._batched(*inputs)

    def act(self, obs: np.ndarray | torch.Tensor, state: torch.Tensor | None = None):
        """Greedy actions: an int64 scalar array for one observation, `[B]` for a batch; for a
        td3/sac actor, float32 actions in the env's units, `[action_dim]` or `[B, action_dim]`.
        A recurrent policy takes its state and returns (actions, the next state)."""
        if self.outputs == "actions":
            return self._run(obs, state).numpy()
        if self.recurrent:
            q, state = self._run(obs, state)
            return q.argmax(dim=-1).numpy(), state
        return self._run(obs, state).argmax(dim=-1).numpy()

    def episodes_actor(self, batch: int):
        """Greedy actions for `batch` envs whose episodes start at the first call, as a function of
        their observations alone (a recurrent policy's state is carried between calls): what an
        evaluation steps with."""
        if not self.recurrent:
            return self.act
        state = self.initial_state(batch)

        def act(obs):
            nonlocal state
            actions, state = self.act(obs, state)
            return actions

        return act


def _real(obs) -> torch.Tensor:
    """`obs` as a float32 tensor; ValueError for bool or complex values."""
    tensor = torch.as_tensor(obs)
    if tensor.dtype == torch.bool or tensor.is_complex():
        raise ValueError(f"policy.pt2 takes real-valued observations, got {tensor.dtype} (bool images go in "
                         "channels-first as 0/255, as raypex's image conversion gives them)")
    return tensor.to(torch.float32)


class PolicyFileError(ValueError):
    """A file that is not a readable policy.pt2 (cut short in a copy, damaged, or not raypex's)."""


def load_policy(path: str | Path) -> ExportedPolicy:
    """Read policy.pt2 written by `export_policy_archive` (or by raypex before it held two
    programs: one observation then goes through the batch program as a batch of one). Raises
    PolicyFileError, in one line, for a file that cannot be read as one."""
    try:
        programs, outputs = _read_programs(path)
        program = programs[BATCH_PROGRAM]
    except CodeInPolicyFile:
        raise
    except Exception as err:  # torch reports a damaged archive in several types; to the user it is one thing
        first = (str(err).strip().splitlines() or [type(err).__name__])[0].split(". ")[0]
        raise PolicyFileError(f"{path}: not a readable policy.pt2 (cut short, damaged, or not written by "
                              f"raypex): {first}") from err
    example = program.example_inputs[0]
    obs_shape = each_part(lambda part: tuple(int(size) for size in part.shape[1:]), example[0])
    state_size = int(example[1].shape[1]) if outputs == RECURRENT else 0
    batched = program.module()
    if ONE_OBSERVATION_PROGRAM in programs:
        single = programs[ONE_OBSERVATION_PROGRAM].module()
    else:
        single = _OneObservation(batched)
    return ExportedPolicy(batched, single, obs_shape, outputs, state_size)


# What torch.export writes for raypex's policies: programs as JSON, weights and constants as raw
# bytes with JSON configs, example inputs as a tensor file, extra files as text, and a few markers.
# Its reader also unpickles (weights or constants marked `use_pickle`, opaque objects, example
# inputs that fail a weights-only load, legacy .pt files) and loads compiled AOTInductor code:
# an archive holding anything beyond this list is refused before torch reads it.
_PROGRAM_FILES = re.compile(
    r"[^/]+/(models/[^/]+\.json|data/weights/weight_\d+|data/(weights|constants)/[^/]+_(weights|constants)_config\.json"
    r"|data/constants/tensor_constant\d+|data/sample_inputs/[^/]+\.pt|extra/[^/]+|archive_format|archive_version"
    r"|byteorder|\.data/version|\.data/serialization_id)")


class CodeInPolicyFile(PolicyFileError):
    """A policy.pt2 holding something torch would unpickle or execute: refused unread."""


def check_no_code(path: str | Path) -> None:
    """CodeInPolicyFile, in one line naming the part, when the archive at `path` holds anything
    torch's reader would unpickle or execute (see _PROGRAM_FILES); a file that is not a zip archive
    at all is left to the reader's own error."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        return
    with archive:
        for name in archive.namelist():
            if name.endswith("/"):
                continue
            if not _PROGRAM_FILES.fullmatch(name):
                raise CodeInPolicyFile(f"{path}: not a readable policy.pt2 (it holds {name}, which raypex never "
                                       "writes and which could run code when loaded): refused unread")
            if name.endswith("_config.json") and _pickled_payloads(archive.read(name)):
                raise CodeInPolicyFile(f"{path}: not a readable policy.pt2 ({name} marks payloads as pickled, "
                                       "which raypex never writes and which could run code when loaded): refused unread")
            if name.split("/")[-2] == "sample_inputs":
                try:
                    with warnings.catch_warnings():  # torch warns of protocols it was not written with
                        warnings.simplefilter("ignore")
                        torch.load(io.BytesIO(archive.read(name)), weights_only=True)
                except Exception:  # noqa: BLE001 - torch would retry it unpickled: whatever a weights-only load refuses
                    raise CodeInPolicyFile(f"{path}: not a readable policy.pt2 ({name} is not plain tensors and "
                                           "could run code when loaded): refused unread") from None


def _pickled_payloads(config: bytes) -> bool:
    try:
        entries = json.loads(config)["config"].values()
        return any(entry.get("use_pickle", True) for entry in entries)
    except (ValueError, KeyError, AttributeError, TypeError):
        return True  # unreadable: not what torch.export wrote


def _read_programs(path: str | Path) -> tuple[dict, str]:
    check_no_code(path)
    try:
        from torch.export.pt2_archive._package import load_pt2
    except ImportError:  # a torch without the multi-program archive
        return {BATCH_PROGRAM: torch.export.load(str(path))}, "q_values"
    contents = load_pt2(str(path))
    outputs = contents.extra_files.get(OUTPUTS_FILE, "q_values")  # policies from before td3/sac have none
    return contents.exported_programs, outputs.decode() if isinstance(outputs, bytes) else str(outputs)
