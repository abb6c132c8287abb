"""Greedy evaluation: giving up early on an evaluation is exact and saves the long episodes."""

import numpy as np
import pytest

from raypex.actors.envs import known_max_return
from raypex.actors.evaluator import Evaluator

EPISODES = 20


def balancing(obs: np.ndarray) -> np.ndarray:
    """A hand-made CartPole controller: push towards where the pole is falling (long episodes)."""
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)


def wobbly(obs: np.ndarray) -> np.ndarray:
    """A worse controller that also reacts to the cart's speed: episodes of 93 to 201 steps here."""
    return (obs[:, 2] + 0.05 * obs[:, 3] + 0.05 * obs[:, 1] > 0).astype(np.int64)


def half_broken(obs: np.ndarray) -> np.ndarray:
    """Balances in the first half of the envs, always pushes left (about 10 steps) in the rest."""
    actions = balancing(obs)
    actions[len(obs) // 2:] = 0
    return actions


def evaluate(policy, give_up=None, seed: int = 5):
    """One evaluation from a fresh evaluator, so every call sees the same episode seeds."""
    calls = []

    def counted(obs):
        calls.append(1)
        return policy(obs)

    returns = Evaluator("CartPole-v1", {}, EPISODES, seed, max_episode_steps=27_000).evaluate(counted, give_up)
    return returns, len(calls)


@pytest.mark.parametrize("policy", [balancing, wobbly, half_broken])
def test_giving_up_never_drops_an_evaluation_that_reaches_its_target(policy):
    full, _ = evaluate(policy)
    mean = full.mean()
    for target in (mean - 50, mean - 0.5, mean, mean + 0.5, mean + 50):
        result, _ = evaluate(policy, (min(target, 500.0), 500.0))
        if min(target, 500.0) <= mean:
            assert result is not None and np.array_equal(result, full), target
        else:
            assert result is None, target


def test_a_hopeless_evaluation_stops_after_its_first_short_episodes():
    full, full_calls = evaluate(half_broken)
    assert full.max() >= 200 and full.mean() < 490  # long and short episodes, far from the target
    gave_up, calls = evaluate(half_broken, (490.0, 500.0))
    assert gave_up is None
    assert calls * 10 <= full_calls


def test_known_max_returns_only_without_kwargs_that_could_change_them():
    assert known_max_return("CartPole-v1", {}) == 500.0
    assert known_max_return("CartPole-v1", {"max_episode_steps": 1000}) is None
    assert known_max_return("ALE/Breakout-v5", {}) is None


def test_an_evaluation_given_no_weights_is_lost_not_a_crash():
    """A weights ref answered by a learner Ray had just restarted holds None (it has published
    nothing yet): the evaluator returns None, which the driver counts as a lost evaluation. It once
    raised AttributeError and ended a run that was meant to end with 'the learner died'."""
    from raypex.actors.settings import EvaluatorSettings
    from raypex.cluster.hosts.evaluator_actor import EvaluatorActor

    evaluator = EvaluatorActor(EvaluatorSettings("CartPole-v1", {}, 2, 0, (4,), "float32", 2, [8], True, 0, False, 0.0, 27_000))
    assert evaluator.evaluate(None) is None
    evaluator.evaluator.close()


def test_an_episode_that_never_ends_stops_at_max_episode_steps_scored_so_far():
    """MinAtar registers its games with no time limit, and a greedy Seaquest policy that keeps still
    never ends an episode: an evaluation (in a run, or raypex eval) ran forever. Half the envs hold
    still (cut at the cap), half dive (the sub runs out of oxygen within 200 steps, an end of its
    own); the policy refuses to be asked past the cap, so a missing cap fails instead of hanging."""
    cap, steps = 300, []

    def half_still(obs: np.ndarray) -> np.ndarray:
        steps.append(1)
        assert len(steps) <= cap, "the evaluation went past max_episode_steps"
        return np.where(np.arange(len(obs)) % 2 == 0, 0, 4)  # 0: no-op, 4: down in Seaquest's minimal set

    evaluator = Evaluator("MinAtar/Seaquest-v1", {}, 6, 0, 1, max_episode_steps=cap)
    returns = evaluator.evaluate(half_still)
    evaluator.close()
    assert len(returns) == 6 and len(steps) == cap
    assert evaluator.cut == 3  # the still ones; the divers ended on their own, sooner
