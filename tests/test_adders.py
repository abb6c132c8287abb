"""The adders own episode bookkeeping once: autoreset steps, lives and the training reward (no Ray)."""

import numpy as np
import pytest

from raypex.actors.adders import EnvStep, FrameAdder, TransitionAdder
from raypex.actors.nstep import NStepFolder

F, T = np.array([False]), np.array([True])
FRAME = (2, 2)


def stacks(value: int) -> np.ndarray:
    return np.full((1, 4, *FRAME), value, np.uint8)


def frame_adder(**options) -> FrameAdder:
    return FrameAdder(1, 0.9, 1, 8, stacks(0), **options)


def transition_adder(**options) -> TransitionAdder:
    return TransitionAdder(NStepFolder(1, 0.9, 1, (1,), np.float32, 8), **options)


def step(i: int, terminated=F, truncated=F, lives=None, reward=1.0, pixels=True) -> EnvStep:
    obs = stacks(i) if pixels else np.array([[float(i)]], np.float32)
    next_obs = stacks(i + 1) if pixels else np.array([[float(i + 1)]], np.float32)
    return EnvStep(obs, np.array([i]), np.array([reward]), terminated, truncated, next_obs,
                   None if lives is None else np.array([lives]))


@pytest.mark.parametrize("pixels", [True, False], ids=["frames", "transitions"])
def test_a_lost_life_ends_the_window_and_the_next_real_step_is_kept(pixels):
    adder = (frame_adder if pixels else transition_adder)(life_loss=True, lives=np.array([3]))
    reals = [adder.add(step(i, lives=lives, pixels=pixels))[0] for i, lives in enumerate([3, 2, 2, 2])]
    out = adder.pop()
    assert reals == [True, True, True, True]  # the game goes on: no step after the loss is dropped
    assert out["action"].tolist() == [0, 1, 2, 3]
    assert out["discount"].tolist() == pytest.approx([0.9, 0.0, 0.9, 0.9])  # the losing step: terminal


@pytest.mark.parametrize("pixels", [True, False], ids=["frames", "transitions"])
def test_the_step_after_an_episode_is_a_dropped_reset_step_even_if_lives_go_up(pixels):
    adder = (frame_adder if pixels else transition_adder)(life_loss=True, lives=np.array([1]))
    reals = [adder.add(step(0, lives=1, pixels=pixels))[0],
             adder.add(step(1, terminated=T, lives=0, pixels=pixels))[0],
             adder.add(step(2, lives=5, pixels=pixels))[0],  # the reset step: the new game's lives
             adder.add(step(3, lives=5, pixels=pixels))[0]]
    out = adder.pop()
    assert reals == [True, True, False, True]
    assert out["action"].tolist() == [0, 1, 3]
    assert out["discount"].tolist() == pytest.approx([0.9, 0.0, 0.9])


def test_without_life_loss_lives_are_ignored_and_rewards_clipped_when_asked():
    adder = transition_adder(clip_rewards=True)
    adder.add(step(0, lives=3, reward=7.5, pixels=False))
    adder.add(step(1, lives=2, reward=-0.25, pixels=False))
    out = adder.pop()
    assert out["return"].tolist() == pytest.approx([1.0, -0.25]) and out["discount"].tolist() == pytest.approx([0.9] * 2)
    assert adder.pop() is None  # nothing completed since: nothing to push


def test_frame_steps_restart_at_an_episode_start():
    adder = frame_adder()
    for i, terminated in enumerate([F, T, F, F]):
        adder.add(step(i, terminated=terminated))
    chunk = adder.pop()
    # frame 0 starts the stream; step 1 ends the episode; step 2 (reset) shows the new episode's first
    assert chunk["frame_step"][:, 0].tolist() == [0, 1, 2, 0, 1]
    assert chunk["first_index"] == 0 and len(chunk["frames"]) == 5
    assert adder.pop()["first_index"] == 5  # frames are numbered on across chunks
