"""The settings each component is built from, derived from the run config (no Ray here).

Both runtimes' wirings (cluster/ray_runtime/wiring.py, cluster/local/wiring.py) build their
collectors, replay and learner from these same functions, so the two cannot drift apart.
"""

from __future__ import annotations

from raypex.actors.envs import EnvSpec, known_max_return
from raypex.actors.settings import CollectorSettings, EvaluatorSettings
from raypex.cluster.config.schema import LearnerConfig, RunConfig
from raypex.cluster.plan.elastic import spread_order
from raypex.learner.algorithms.registry import algorithm
from raypex.learner.settings import LearnerSettings
from raypex.replay.priorities import BetaSchedule, PrioritySettings
from raypex.replay.rate_limit import SamplesPerInsertLimiter
from raypex.replay.shard import StorageSpec


def collector_settings(config: RunConfig, spec: EnvSpec, index: int) -> CollectorSettings:
    """The fields collector `index` needs. With collectors.num auto, slot `index`'s place in the
    spread of exploration rates (cluster/plan/elastic.py, spread_order): the slots taken first span it."""
    c, plugin = config.collectors, algorithm(config.algo.name)
    place = spread_order(c.shards)[index] if c.elastic else index
    return CollectorSettings(
        index=index, num_collectors=c.shards, env_id=config.env.id, env_kwargs=config.env.kwargs,
        num_envs=config.env.num_envs, obs_shape=spec.obs_shape, obs_dtype=spec.obs_dtype, obs_parts=spec.obs_parts,
        num_actions=spec.num_actions, hidden=config.network.hidden, dueling=config.network.dueling,
        n_step=config.algo.n_step, gamma=config.algo.gamma, chunk_steps=c.chunk_steps,
        epsilon_base=c.epsilon_base, epsilon_alpha=c.epsilon_alpha,
        epsilon_anneal_steps=c.epsilon_anneal_steps, seed=config.seed, frame_stack=spec.frame_stack,
        clip_rewards=config.env.clip_rewards, terminal_on_life_loss=config.env.terminal_on_life_loss,
        act_precision=c.act_precision, act_fusion=c.act_fusion,
        act_device="cuda" if c.act_device == "cuda" else "cpu",  # auto is resolved to one of them once Ray is up
        acting=c.acting,
        td_priorities=config.replay.prioritized and config.replay.initial_priority == "td",
        algo=config.algo.name, action_low=spec.action_low, action_high=spec.action_high,
        action_noise=collector_noise(config, place) if plugin.collector_noise else 0.0,
        exploration_index=place,
        env_wrappers=tuple(config.env.wrappers),
        encoder=config.network.encoder, encoder_kwargs=config.network.encoder_kwargs, quantiles=config.algo.quantiles,
        layer_norm=config.network.critic_norm == "layer_norm",
        recurrent_size=config.network.recurrent_size if plugin.sequences else 0,
        sequence_period=config.replay.sequence_length - config.replay.sequence_overlap if plugin.sequences else 0,
    )


def collector_noise(config: RunConfig, index: int) -> float:
    """Collector `index`'s action noise (for an algorithm whose collectors add it, TD3's): exploration_noise spread geometrically from
    exploration_noise / noise_spread to exploration_noise * noise_spread over the collectors (Ape-X
    spreads epsilon the same way), so some collectors explore widely and some act nearly greedily."""
    a, num = config.algo, config.collectors.shards
    if num == 1:
        return a.exploration_noise
    return a.exploration_noise * a.noise_spread ** (2.0 * index / (num - 1) - 1.0)


def storage_spec(config: RunConfig, spec: EnvSpec) -> StorageSpec:
    """What each shard stores (pixel observations frame-once, per env of its collector; steps and
    the sequences over them for an algorithm that trains on sequences)."""
    r = config.replay
    if algorithm(config.algo.name).sequences:
        return StorageSpec(r.capacity, spec.obs_shape, spec.obs_dtype, 0, config.env.num_envs, spec.action_dim,
                           r.sequence_length, r.sequence_overlap, 2 * config.network.recurrent_size, spec.obs_parts)
    return StorageSpec(r.capacity, spec.obs_shape, spec.obs_dtype, spec.frame_stack, config.env.num_envs,
                       spec.action_dim, obs_parts=spec.obs_parts)


def learner_settings(config: RunConfig, spec: EnvSpec) -> LearnerSettings:
    """The fields the learner needs."""
    lc = config.learner
    return LearnerSettings(
        obs_shape=spec.obs_shape, obs_dtype=spec.obs_dtype, obs_parts=spec.obs_parts, num_actions=spec.num_actions,
        hidden=config.network.hidden,
        dueling=config.network.dueling, double_dqn=config.algo.double_dqn,
        huber_delta=config.algo.huber_delta, lr=lc.lr, adam_eps=lc.adam_eps,
        max_grad_norm=lc.max_grad_norm, micro_batch=lc.micro_batch,
        accumulation_steps=lc.accumulation_steps, target_update=lc.target_update,
        target_update_every=target_update_every(lc), target_tau=lc.target_tau,
        updates_per_epoch=lc.updates_per_epoch, broadcast_every_epochs=lc.broadcast_every_epochs,
        precision=lc.precision, compile=None if lc.compile == "auto" else lc.compile, seed=config.seed,
        cuda_graphs=lc.cuda_graphs if algorithm(config.algo.name).capturable else "off",
        prioritized=config.replay.prioritized,
        algo=config.algo.name, action_low=spec.action_low, action_high=spec.action_high,
        policy_noise=config.algo.policy_noise, noise_clip=config.algo.noise_clip, policy_delay=policy_delay(config),
        target_entropy=None if config.algo.target_entropy == "auto" else config.algo.target_entropy,
        init_temperature=config.algo.init_temperature, obs_norm=config.network.obs_norm,
        critic_norm=config.network.critic_norm, critic_head=config.network.critic_head,
        critic_bins=config.network.critic_bins, critic_range=config.network.critic_range,
        sale=config.network.sale, n_step=config.algo.n_step, burn_in=config.algo.burn_in,
        recurrent_size=config.network.recurrent_size, core=config.network.core, value_rescale=config.algo.value_rescale,
        sequence_length=config.replay.sequence_length, quantiles=config.algo.quantiles,
        encoder=config.network.encoder, encoder_kwargs=config.network.encoder_kwargs,
    )


def target_update_every(lc: LearnerConfig) -> int:
    """Updates between hard target copies: learner.target_update_every_samples in whole updates."""
    return max(1, round(lc.target_update_every_samples / (lc.micro_batch * lc.accumulation_steps)))


def policy_delay(config: RunConfig) -> int:
    """Critic updates per actor update: algo.policy_delay, its auto the algorithm's own (TD3's 2, its
    paper's; SAC's 1)."""
    delay = config.algo.policy_delay
    return delay if delay != "auto" else algorithm(config.algo.name).default_policy_delay


def priority_settings(config: RunConfig) -> PrioritySettings | None:
    """Each shard's prioritized-replay settings (None: uniform replay)."""
    r = config.replay
    return PrioritySettings(r.alpha, r.priority_epsilon, r.initial_priority) if r.prioritized else None


def beta_schedule(config: RunConfig) -> BetaSchedule | None:
    """The learner's importance exponent over its updates (None: uniform replay)."""
    r, lc = config.replay, config.learner
    if not r.prioritized:
        return None
    return BetaSchedule(r.beta, r.beta_anneal_updates, lc.micro_batch * lc.accumulation_steps)


def replay_limiter(config: RunConfig) -> SamplesPerInsertLimiter:
    """The replay's one limiter: inserts into every shard against the learner's draws."""
    r = config.replay
    return SamplesPerInsertLimiter(r.samples_per_insert, r.min_size, r.error_buffer)


def evaluator_settings(config: RunConfig, spec: EnvSpec) -> EvaluatorSettings:
    """What the run's evaluator is built from."""
    return EvaluatorSettings(config.env.id, config.env.kwargs, config.eval.episodes, config.seed + 77, spec.obs_shape,
                             spec.obs_dtype, spec.num_actions, config.network.hidden, config.network.dueling,
                             config.env.frame_stack, spec.frame_stack > 0 and not spec.obs_parts, config.eval.epsilon,
                             config.eval.max_episode_steps,
                             spec.action_low, spec.action_high, config.network.critic_norm == "layer_norm",
                             config.algo.name,
                             config.network.recurrent_size if algorithm(config.algo.name).sequences else 0,
                             tuple(config.env.wrappers), config.network.encoder, config.network.encoder_kwargs,
                             obs_parts=spec.obs_parts)


def eval_give_up(config: RunConfig) -> tuple[float, float] | None:
    """(stop.eval_return, the most one episode can score) when both are known, so an evaluation
    can stop once the target is out of reach; None means every evaluation runs to the end.
    eval.max_return auto is resolved from the env."""
    bound = config.eval.max_return
    max_return = known_max_return(config.env.id, config.env.kwargs) if bound == "auto" else bound
    target = config.stop.eval_return
    return (target, max_return) if target is not None and max_return is not None else None
