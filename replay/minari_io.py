"""Offline datasets in Minari's format, both ways: a run's replay written as a dataset (`raypex
export RUN --minari DATASET_ID`), and a dataset read as one-step transitions for `replay.prior`.

Datasets live in Minari's local datasets directory (MINARI_DATASETS_PATH, else ~/.minari/datasets),
written in Minari's arrow format. Nothing is downloaded: a dataset that is not there is one line.
Minari is the `minari` extra; without it each entry point says how to install it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from raypex.replay.episodes import Episode

INSTALL = "pip install 'raypex[minari]'"


class DatasetError(ValueError):
    """A dataset that cannot be written or read as asked: its one-line reason."""


def _minari():
    try:
        import minari
    except ImportError:
        raise DatasetError(f"Minari datasets need the minari package: {INSTALL}") from None
    return minari


def write_dataset(dataset_id: str, episodes: list[Episode], env_spec, observation_space, action_space,
                  algorithm: str) -> str:
    """Write `episodes` as the local dataset `dataset_id` (env_spec: the gymnasium EnvSpec the run
    stepped); returns the directory it is in. DatasetError when one of that id exists already."""
    minari = _minari()
    from minari.data_collector import EpisodeBuffer

    if dataset_id in minari.list_local_datasets():
        raise DatasetError(f"a local Minari dataset {dataset_id} exists already; choose another id, or remove it "
                           f"with: minari delete {dataset_id}")
    if not episodes:
        raise DatasetError("the replay holds no whole episode to write")
    buffers = []
    for number, episode in enumerate(episodes):
        arrays = episode.arrays()
        buffers.append(EpisodeBuffer(id=number, observations=list(arrays["observations"]),
                                     actions=list(arrays["actions"]), rewards=list(arrays["rewards"]),
                                     terminations=list(arrays["terminations"]),
                                     truncations=list(arrays["truncations"])))
    try:
        with warnings.catch_warnings():  # Minari's advice to name an author and a code link: not for raypex's users
            warnings.simplefilter("ignore", UserWarning)
            dataset = minari.create_dataset_from_buffers(
                dataset_id, buffers, env=env_spec, eval_env=env_spec, algorithm_name=f"raypex {algorithm}",
                observation_space=observation_space, action_space=action_space, data_format="arrow",
                description="A raypex run's replay, its episodes rebuilt from every shard.")
    except ValueError as err:  # an id Minari does not accept, say
        raise DatasetError(f"dataset id {dataset_id!r}: {err}") from None
    return str(dataset.spec.data_path)


@dataclass(frozen=True)
class PriorData:
    """A dataset's steps as one-step transitions, in the layout replay stores (replay/ring.py):
    obs, action (Box actions in the env's units until scaled), reward, terminated, next_obs."""

    dataset_id: str
    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    next_obs: np.ndarray
    episodes: int

    def __len__(self) -> int:
        return len(self.reward)


def dataset_spaces(dataset_id: str) -> tuple:
    """(observation space, action space, steps) of the local dataset `dataset_id`, from its
    metadata; DatasetError when it is not there."""
    minari = _minari()
    _check_local(minari, dataset_id)
    dataset = minari.load_dataset(dataset_id)
    return dataset.observation_space, dataset.action_space, int(dataset.total_steps)


def _check_local(minari, dataset_id: str) -> None:
    if dataset_id not in minari.list_local_datasets():
        raise DatasetError(f"no local Minari dataset {dataset_id} (in {minari.storage.get_dataset_path()}; "
                           "raypex export RUN --minari ID writes one, MINARI_DATASETS_PATH says where)")


def read_dataset(dataset_id: str) -> PriorData:
    """The local dataset `dataset_id` as transitions; DatasetError when it is not there or holds
    observations replay cannot store (Dict or Tuple ones)."""
    minari = _minari()
    _check_local(minari, dataset_id)
    dataset = minari.load_dataset(dataset_id)
    parts: dict[str, list[np.ndarray]] = {"obs": [], "action": [], "reward": [], "terminated": [], "next_obs": []}
    episodes = 0
    for episode in dataset.iterate_episodes():
        observations = episode.observations
        if not isinstance(observations, np.ndarray):
            raise DatasetError(f"dataset {dataset_id}: its observations are a {type(observations).__name__}; "
                               "replay.prior takes Box observations")
        parts["obs"].append(observations[:-1])
        parts["next_obs"].append(observations[1:])
        parts["action"].append(np.asarray(episode.actions))
        parts["reward"].append(np.asarray(episode.rewards, np.float32))
        parts["terminated"].append(np.asarray(episode.terminations, bool))
        episodes += 1
    if not episodes:
        raise DatasetError(f"dataset {dataset_id} holds no episode")
    joined = {name: np.concatenate(arrays) for name, arrays in parts.items()}
    return PriorData(dataset_id, episodes=episodes, **joined)
