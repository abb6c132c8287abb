"""What a run writes that a user reads back: summary.json's fields and the TensorBoard tags, each
with its meaning. The run-directory reference page is generated from these tables when the docs
are built, and the integration test holds a real run's summary.json and event files to them.
"""

from __future__ import annotations

import re

# field -> meaning; the fields every summary.json holds, in the order a reader wants them
SUMMARY_FIELDS = {
    "env_id": "the env's Gymnasium id",
    "seed": "the run's seed",
    "ended": "how the run ended: `solved`, `env_steps`, `wall_s` (stop.wall_s), `stopped` (from Python: "
             "`RunningRun.stop`, or `stop_when` said so), `interrupted`, `terminated`, or `failed: <what died>`",
    "epochs": "epochs trained",
    "env_steps": "transitions that reached replay (the reset step after an episode is not counted): "
                 "`replay_inserted_per_shard` plus `replay_lost_transitions`, exactly",
    "wall_s": "seconds of the whole run (a resumed run's include the runs before it)",
    "time_to_solve_s": "seconds from the command's start to the first evaluation at or above "
                       "`stop.eval_return`; null if never",
    "env_steps_at_solve": "the env steps when the solve was seen",
    "solve_weights_env_steps": "the env steps when the solving evaluation took its weights",
    "solve_seen_after_s": "seconds from the solving evaluation taking its weights to the solve",
    "final_eval_return": "the newest evaluation's mean return",
    "policy_eval_return": "how the policy in policy.pt2 scored in its evaluation",
    "policy_version": "the weights version policy.pt2 holds",
    "env_steps_per_s": "env steps per second of this command's collecting",
    "episodes": "episodes this command's collectors finished",
    "episode_return_mean": "their mean return, as the env gave it (unclipped); null before the first",
    "learner_samples": "transitions trained on by this command's learner",
    "learner_samples_per_s": "learner samples per second of training time",
    "learner_wait_fraction": "the share of the learner's time spent waiting for data",
    "policy_lag_mean": "weights versions a collector's acting lagged the learner's, on average",
    "policy_lag_max": "the same, at most",
    "replay_size_per_shard": "what each shard holds at the end",
    "replay_inserted_per_shard": "what each shard was given over the run",
    "replay_lost_transitions": "transitions collectors sent that died with a learner process: stored after "
                               "the checkpoint it came back from, or all when none came back, or in flight",
    "replay_bytes_per_transition": "replay's bytes per stored transition",
    "startup_s": "when each moment of the start came, in seconds since the command started "
                 "(`raypex bench --stage startup`)",
    "eval_cpu_s": "the evaluator's CPU seconds over every evaluation",
    "evaluations_lost": "evaluations whose actor died or whose weights a restarted learner no longer held",
    "collector_restarts": "collectors (and the evaluator) restarted after dying",
    "collectors_over_time": "[wall seconds, collectors collecting] at the start and at each change (collectors.num "
                            "auto: as nodes join, drain and leave)",
    "learner_restarts": "learners restarted from their newest checkpoint",
    "checkpoint_s_max": "the longest a checkpoint set took, from asking the learner to its manifest written",
    "replay_checkpoint_pause_s_max": "the longest inserts waited while a shard was copied for a checkpoint",
}
# fields summary.json holds only with prioritized replay
PRIORITIZED_SUMMARY_FIELDS = {
    "priority_updates_applied": "transitions whose priorities the learner's errors updated",
    "priority_updates_stale": "priority updates dropped because their slot had been overwritten since",
    "priority_updates_unsent": "transitions whose errors the learner did not send (the in-flight bound)",
}
# fields summary.json holds only with replay.prior
PRIOR_SUMMARY_FIELDS = {
    "replay_prior_transitions": "transitions read from replay.prior's dataset, kept apart from the shards' counts",
    "learner_prior_samples": "of `learner_samples`, those drawn from them",
}

# (tag as written, with <placeholders>; meaning); scalars are plotted against the run's env steps
TENSORBOARD_TAGS = (
    ("charts/episodic_return", ("the collectors' mean episode return (a game's raw score, even when "
                               "training clips rewards)")),
    ("charts/episodic_length", "their mean episode length"),
    ("charts/SPS", "env steps per second"),
    ("eval/return_mean", "the greedy evaluation's mean return"),
    ("eval/return_min", "its lowest episode"),
    ("eval/video", "image: the first episode of every `eval.video_every`-th evaluation"),
    ("losses/<name>", ("what the algorithm's update reports: `td_loss` and `q_values` (every algorithm), "
                      "`actor_loss` (td3, sac), `temperature` (sac), `embedding_loss` (SALE)")),
    ("learner/updates_per_s", "the learner's updates per second of training"),
    ("learner/samples_per_s", "its samples per second"),
    ("learner/wait_fraction", "the share of its time spent waiting for data"),
    ("learner/grad_scale", "fp16's loss scale (fp16 only)"),
    ("learner/gpu_busy_fraction", "the share of the epoch the GPU was busy (on a GPU)"),
    ("learner/allreduce_fraction", ("several learners: the share of the first learner's epoch spent summing "
                                   "gradients across them")),
    ("replay/size", "transitions held over all shards"),
    ("replay/insert_rate", "transitions inserted per second"),
    ("replay/sample_rate", "transitions sampled per second"),
    ("replay/replay_ratio", "samples per insert over the run"),
    ("replay/bytes_per_transition", "replay's bytes per stored transition"),
    ("replay/priority_mean", "a stored transition's mean priority mass (prioritized replay)"),
    ("replay/priority_max", "its largest"),
    ("replay/is_weight_min", "the smallest importance weight served since the last poll"),
    ("replay/beta", "the importance weights' exponent"),
    ("collector/<rate>", "the collectors' mean exploration rate: `epsilon` (dqn, r2d2) or `noise` (td3)"),
    ("collector/<i>/<rate>", "collector i's exploration rate (Ape-X: each explores at its own)"),
    ("collector/<i>/episodic_return", "collector i's mean episode return"),
    ("perf/policy_lag_mean", "weights versions the collectors' acting lagged the learner's, on average"),
    ("perf/policy_lag_max", "the same, at most"),
    ("perf/broadcast_ms", "milliseconds to put the weights into Ray's object store"),
    ("perf/collectors", "collectors collecting (collectors.num auto: it follows the cluster's nodes)"),
    ("hparams/final_eval_return", "at the end: the newest evaluation, for the HPARAMS tab"),
    ("hparams/time_to_solve_s", "at the end: seconds to solve, for the HPARAMS tab"),
)


def tag_pattern(documented: str) -> re.Pattern:
    """The tags a documented tag stands for: `<i>` a collector's index, other placeholders a word."""
    pattern = re.escape(documented).replace(re.escape("<i>"), r"\d+")
    return re.compile(re.sub(re.escape("<") + r"[a-z]+" + re.escape(">"), r"[a-z_]+", pattern) + "$")


def undocumented_tags(tags: set[str]) -> set[str]:
    """The tags in `tags` no documented tag stands for."""
    patterns = [tag_pattern(documented) for documented, _ in TENSORBOARD_TAGS]
    return {tag for tag in tags if not any(p.match(tag) for p in patterns)}


def markdown_summary() -> str:
    """summary.json's fields as a markdown table."""
    rows = [f"| `{name}` | {meaning} |" for name, meaning in SUMMARY_FIELDS.items()]
    rows += [f"| `{name}` | {meaning} (prioritized replay only) |" for name, meaning in PRIORITIZED_SUMMARY_FIELDS.items()]
    rows += [f"| `{name}` | {meaning} (with replay.prior only) |" for name, meaning in PRIOR_SUMMARY_FIELDS.items()]
    return "\n".join(["| field | meaning |", "| --- | --- |", *rows])


def markdown_tags() -> str:
    """The TensorBoard tags as a markdown table."""
    rows = [f"| `{tag}` | {meaning} |" for tag, meaning in TENSORBOARD_TAGS]
    return "\n".join(["| tag | meaning |", "| --- | --- |", *rows])
