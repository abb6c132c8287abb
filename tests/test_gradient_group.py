"""Two learners as one (learner/gradient_group.py, learner/group_feed.py): two gloo ranks in
processes of their own. Given their parts of the same global batches (a different split every
update, an empty part included), they end 50 updates with the parameters and optimizer state of
one learner given every batch whole, for DQN, TD3, SAC and R2D2. As Learners drawing from replays
of different sizes (prioritized), they train epochs in step, stay identical, draw the group's
batch between them, and end an epoch together when one of them is asked to stop."""

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from raypex.learner.algorithms.registry import algorithm
from raypex.learner.gradient_group import BatchPart, GradientGroup
from raypex.learner.learner import Learner
from raypex.learner.synthetic import synthetic_batch
from tests.test_learner import filled_replay, settings

UPDATES, BATCH = 50, 32
ALGORITHMS = {
    "dqn": {},
    "td3": {"action_low": (-1.0, -1.0), "action_high": (1.0, 1.0), "policy_delay": 2, "target_update": "polyak"},
    "sac": {"action_low": (-1.0, -1.0), "action_high": (1.0, 1.0), "policy_delay": 1, "target_update": "polyak"},
    "r2d2": {"sequence_length": 10, "burn_in": 2, "n_step": 3, "recurrent_size": 16, "target_update": "polyak"},
}


def step_for(algo: str):
    s = settings(algo=algo, micro_batch=BATCH, max_grad_norm=1.0, **ALGORITHMS[algo])
    torch.manual_seed(0)  # the same initial networks on every learner, as the Learner seeds them
    return s, algorithm(algo).build_step(s, torch.device("cpu"))


def global_batches(s) -> tuple[list[dict], list[int]]:
    """The updates' whole batches and how many of each learner 0 holds (the rest are learner 1's)."""
    rng = np.random.default_rng(1)
    batches = [synthetic_batch(s, torch.device("cpu"), rng) for _ in range(UPDATES)]
    firsts = [int(n) for n in rng.integers(0, BATCH + 1, UPDATES)]
    firsts[3], firsts[7] = 0, BATCH  # a learner with nothing to draw still steps with the group
    return batches, firsts


def tensors(state) -> list[torch.Tensor]:
    """Every tensor of a step's state_dict, in a fixed order."""
    if isinstance(state, torch.Tensor):
        return [state.detach().clone()]
    if isinstance(state, dict):
        return [t for key in sorted(state, key=str) for t in tensors(state[key])]
    if isinstance(state, (list, tuple)):
        return [t for item in state for t in tensors(item)]
    return []


def one_learner(algo: str) -> list[torch.Tensor]:
    s, step = step_for(algo)
    batches, _ = global_batches(s)
    for update, batch in enumerate(batches, 1):
        step(batch)
        step.after_update(update)
    return tensors(step.state_dict())


def rank_main(rank: int, init_file: str, results: str) -> None:
    # One thread: the suite runs two workers on two cores, and two ranks of two spinning OpenMP threads
    # each, beside the other worker, took 38 s here against 7.5 s with one
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        out = {}
        for algo in ALGORITHMS:
            s, step = step_for(algo)
            step.gradients = group = GradientGroup()
            batches, firsts = global_batches(s)
            for update, (batch, first) in enumerate(zip(batches, firsts), 1):
                offset, count = (0, first) if rank == 0 else (first, BATCH - first)
                group.part = BatchPart(offset, count, BATCH)
                if count:
                    step({name: t[:, offset:offset + count] for name, t in batch.items()})
                else:  # no micro-batch at all
                    step({name: t[:0, :0] for name, t in batch.items()})
                step.after_update(update)
            out[algo] = tensors(step.state_dict())
        out["learners"] = learners_in_a_group(rank)
        torch.save(out, f"{results}.{rank}")
    finally:
        dist.destroy_process_group()


def learners_in_a_group(rank: int) -> dict:
    """Rank 0 a Learner over two shards of 256, rank 1 over one of 64 (prioritized): three epochs,
    rank 1 asked to stop before the third."""
    s = settings(prioritized=True, updates_per_epoch=5, micro_batch=BATCH)
    replay = filled_replay(s, np.random.default_rng(rank), size=256 if rank == 0 else 64, shards=2 - rank)
    torch.manual_seed(0)  # the same initial networks on every learner, as the Learner seeds them
    learner = Learner(s, torch.device("cpu"), replay, [].append)
    learner.join(GradientGroup())
    learner.warmup()
    epochs = [learner.train_epoch().updates_in_epoch for _ in range(2)]
    if rank == 1:
        learner.request_stop()
    epochs.append(learner.train_epoch().updates_in_epoch)
    return {"epochs": epochs, "sampled": replay.sampled, "state": tensors(learner.step.state_dict())}


def test_two_gloo_learners_step_exactly_as_one_learner_given_every_batch(tmp_path):
    results = str(tmp_path / "results")
    mp.spawn(rank_main, args=(str(tmp_path / "rendezvous"), results), nprocs=2, join=True)
    ranks = [torch.load(f"{results}.{rank}") for rank in range(2)]
    for algo in ALGORITHMS:
        expected = one_learner(algo)
        for rank in ranks:
            got = rank[algo]
            assert len(got) == len(expected)
            for a, b in zip(got, expected):
                if a.is_floating_point():
                    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=f"{algo}")
                else:
                    assert torch.equal(a, b), algo


    # as Learners: in step, identical, the group's batches drawn between them, the stop shared
    first, second = (rank["learners"] for rank in ranks)
    assert first["epochs"] == second["epochs"] == [5, 5, 0]
    assert first["sampled"] + second["sampled"] == 10 * BATCH and 0 < second["sampled"] < first["sampled"]
    for a, b in zip(first["state"], second["state"]):
        assert torch.equal(a, b)


def test_a_part_is_the_rows_of_this_learner_in_the_groups_noise():
    group = GradientGroup()
    group.part = BatchPart(3, 2, 8)
    noise = torch.arange(2 * 1 * 8).reshape(2, 1, 8, 1)
    assert group.own_rows(noise, dim=2).flatten().tolist() == [3, 4, 11, 12]
