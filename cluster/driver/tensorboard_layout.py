"""What TensorBoard shows beside the scalars: a custom-scalars layout that groups the charts, and
an hparams entry (the resolved config's key figures against the run's final evaluation and time
to solve) so that runs compare in the HPARAMS tab. Protos only: no torch, no TensorFlow."""

from __future__ import annotations

from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import metadata as custom_scalar_metadata
from tensorboard.plugins.hparams import summary_v2 as hparams_api

from raypex.cluster.config.schema import RunConfig

# chart title -> tag regexes, per category
LAYOUT = {
    "learning": {"return (episodes, greedy evaluation)": [r"charts/episodic_return", r"eval/return_(mean|min)"],
                 "loss and Q-values": [r"losses/.*"]},
    "throughput": {"env steps/s": [r"charts/SPS"], "learner samples/s": [r"learner/samples_per_s"],
                   "replay insert and sample rates": [r"replay/(insert|sample)_rate"]},
    "replay": {"size": [r"replay/size"], "replay ratio": [r"replay/replay_ratio"],
               "priorities": [r"replay/priority_(mean|max)"], "importance weights": [r"replay/(is_weight_min|beta)"]},
    "learner": {"waiting for data": [r"learner/wait_fraction"], "updates/s": [r"learner/updates_per_s"],
                "policy lag": [r"perf/policy_lag_.*"], "broadcast ms": [r"perf/broadcast_ms"],
                "grad scale (fp16)": [r"learner/grad_scale"],
                "all-reduce share (several learners)": [r"learner/allreduce_fraction"]},
    "collectors": {"episodic return per collector": [r"collector/\d+/episodic_return"],
                   "epsilon per collector": [r"collector/\d+/epsilon"]},
}
# the config's key figures in the HPARAMS tab, and the run's results they are compared against
HPARAM_KEYS = ("env.id", "seed", "collectors.num", "env.num_envs", "learner.lr", "learner.micro_batch",
               "learner.accumulation_steps", "learner.precision", "algo.n_step", "algo.gamma",
               "replay.capacity", "replay.samples_per_insert", "network.dueling")
RESULT_TAGS = ("hparams/final_eval_return", "hparams/time_to_solve_s")


def custom_layout() -> Summary:
    """The custom-scalars layout summary (written once, at the start of a run)."""
    categories = [
        layout_pb2.Category(title=category, chart=[
            layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(tag=tags))
            for title, tags in charts.items()])
        for category, charts in LAYOUT.items()]
    # what tensorboard's custom_scalar summary.pb builds, without the TensorFlow it imports for it
    layout = TensorProto(dtype="DT_STRING", string_val=[layout_pb2.Layout(category=categories).SerializeToString()])
    return Summary(value=[Summary.Value(tag=custom_scalar_metadata.CONFIG_SUMMARY_TAG,
                                        metadata=custom_scalar_metadata.create_summary_metadata(), tensor=layout)])


def hparam_values(config: RunConfig) -> dict[str, object]:
    """HPARAM_KEYS' values (lists and other non-scalars as text)."""
    values = {}
    for key in HPARAM_KEYS:
        value = config
        for part in key.split("."):
            value = getattr(value, part)
        values[key] = value if isinstance(value, (bool, int, float, str)) else str(value)
    return values


def hparams_summaries(config: RunConfig, trial: str) -> list[Summary]:
    """The HPARAMS tab's experiment (which figures and results) and this run's values."""
    values = hparam_values(config)
    experiment = hparams_api.hparams_config_pb(
        hparams=[hparams_api.HParam(key) for key in values], metrics=[hparams_api.Metric(tag) for tag in RESULT_TAGS])
    return [experiment, hparams_api.hparams_pb(values, trial_id=trial)]


def result_scalars(final_eval_return: float | None, time_to_solve_s: float | None) -> dict[str, float]:
    """The results the HPARAMS tab compares runs by (a result the run does not have is left out)."""
    results = dict(zip(RESULT_TAGS, (final_eval_return, time_to_solve_s)))
    return {tag: value for tag, value in results.items() if value is not None}
