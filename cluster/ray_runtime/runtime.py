"""The Ray runtime: a run's parts as Ray actors, on a local cluster started for the run or on a
joined one (cluster/driver/runtime.py names the interface; cluster/ray_runtime/wiring.py makes the
connections).

Its start is the slow part of a command's first seconds (a local cluster takes 3-6 s on a laptop):
it connects, chooses the learner's device and where collectors act, reserves the placement
groups, checks a joined cluster's software, and asks for every actor, which then start in parallel.
What the config asks and the cluster cannot give is StartRefused, in one line.
"""

from __future__ import annotations

import time
import uuid

import ray

from raypex.actors.env_ids import code_to_ship
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.ray_runtime.address import ConnectError, connect_error_line
from raypex.cluster.ray_runtime.devices import choose_act_device, choose_device, with_act_device
from raypex.cluster.ray_runtime.placement import Reservation
from raypex.cluster.driver.run_errors import PlacementError, StartRefused
from raypex.cluster.driver.runtime import RuntimeErrors
from raypex.cluster.ray_runtime.elastic import ElasticSupervisor
from raypex.cluster.ray_runtime.supervisor import CollectorSupervisor
from raypex.cluster.ray_runtime.versions import VersionMismatch, ask_node_versions, check_node_versions
from raypex.cluster.ray_runtime.wiring import (
    COLLECTOR_MAX_RESTARTS,
    RunActors,
    check_local_cluster_holds,
    cluster_gpus,
    connect,
    disconnect,
    node_resources,
    reserve_resources,
    shutdown,
    start_actors,
)
from raypex.cluster.hosts.learner_actor import LearnerActor

RAY_ERRORS = RuntimeErrors(
    any=(ray.exceptions.RayError,),
    died=(ray.exceptions.RayActorError,),
    # (unschedulable: a collector pinned to its node, collectors.num auto, whose node is gone)
    restarting=(ray.exceptions.ActorDiedError, ray.exceptions.ActorUnavailableError,
                ray.exceptions.ActorUnschedulableError),
    lost=(ray.exceptions.RayActorError, ray.exceptions.ObjectLostError),
    raised=(ray.exceptions.RayTaskError,),
)


class RayRuntime:
    """Runs the parts as Ray actors and waits on their calls with ray.wait and ray.get."""

    errors = RAY_ERRORS
    polls_every_epoch = False  # the actors run side by side with the loop: it polls every POLL_EVERY_S

    def __init__(self, address: str | None = None, ship_code: bool = True, from_variable: bool = False,
                 connected_device: str | None = None, learner_host: type = LearnerActor,
                 reservation: Reservation | None = None):
        """`address`: a cluster to join (None: start a local one); `ship_code`: a user's env code
        goes to every actor (actors/env_ids.py `code_to_ship`; not inside a Ray job, whose working
        directory is the actors' already); `from_variable`: the address came from RAYPEX_ADDRESS (its errors
        say so). `connected_device`: the caller has connected already and chose this learner
        device (the bench, tests), so the runtime neither connects nor leaves. `learner_host`: the
        learner's Ray host class (the bench and tests subclass it). `reservation`: placement groups
        reserved already (a Tune trial's), used instead of reserving the run's own."""
        self.address, self.ship_code, self.from_variable = address, ship_code, from_variable
        self.device = connected_device
        self.owns_connection = connected_device is None
        self.learner_host = learner_host
        self.started_local = False
        self.group = reservation  # the placement groups, once reserved
        self.actors: RunActors | None = None

    def start(self, config: RunConfig, spec, progress, startup, env_steps_done: int = 0) -> RunActors:
        """Connect (unless connected), choose devices, reserve, ask for every actor (whose
        collectors the loop stops, `env_steps_done` aside)."""
        self.come_back_s = config.collectors.come_back_s
        self.config, self.clock_start = config, startup.clock_start
        try:
            if self.owns_connection:
                if self.address is None:
                    check_local_cluster_holds(config)
                code_dir = code_to_ship(config.env.id) if self.ship_code else None
                if code_dir is not None:
                    progress.message(f"env.id {config.env.id}: {code_dir} goes to every actor as its working directory")
                self.started_local = self.address is None
                connect(self.address, code_dir, progress.message)
                startup.mark("ray_connected", time.time())
                self.device = choose_device(config, cluster_gpus(), progress, len(spec.obs_shape) == 1)
            act_device = choose_act_device(config, node_resources(), self.device, len(spec.obs_shape) == 3, progress)
            run_config = with_act_device(config, act_device)
            self.group = self.group or reserve_resources(run_config, self.device)
            startup.mark("resources_reserved", time.time())
            # On a cluster others set up, whose nodes may run other versions, the version probes go
            # first, the actors right behind them, and the answers are read while the actors start.
            probes = ask_node_versions(self.group) if self.owns_connection and not self.started_local else None
            self.actors = start_actors(run_config, spec, self.group, self.device, uuid.uuid4().hex[:8],
                                       self.learner_host)
            startup.mark("actors_asked", time.time())
            if probes is not None:
                check_node_versions(probes)
        except ConnectError as err:
            raise StartRefused(connect_error_line(err, self.from_variable)) from None
        except (PlacementError, VersionMismatch) as err:
            raise StartRefused(str(err)) from None
        return self.actors

    def call(self, part, method: str, *args, retried: bool = False):
        """`part.method.remote(*args)`; retried: Ray makes a call that finds the actor restarting
        again until the new process takes it (or Ray gives the actor up for dead)."""
        bound = getattr(part, method)
        return (bound.options(max_task_retries=-1) if retried else bound).remote(*args)

    def when_up(self, part):
        """Ray's readiness call, retried until a restarted actor answers it (a call that fails at
        once, the actor gone for good, ends the wait too)."""
        return part.__ray_ready__.options(max_task_retries=-1).remote()

    def wait(self, pending: list, num_returns: int = 1, timeout: float | None = None) -> list:
        """ray.wait's ready list."""
        return ray.wait(pending, num_returns=num_returns, timeout=timeout)[0]

    def get(self, pending, timeout: float | None = None):
        """ray.get."""
        return ray.get(pending, timeout=timeout)

    def supervisor(self, parts: RunActors, progress, reported_env_steps) -> CollectorSupervisor:
        """Restarts the loops of collectors Ray restarted; with collectors.num auto, also starts
        and ends collectors as nodes join and leave (`reported_env_steps(i)`: what collector i
        last reported, for one that leaves without stopping)."""
        collectors = self.config.collectors
        if collectors.elastic:
            return ElasticSupervisor(parts, COLLECTOR_MAX_RESTARTS, progress, self.come_back_s, collectors.per_node,
                                     self.config.learner.num_cpus, self.group.learner_node(), reported_env_steps,
                                     self.clock_start)
        return CollectorSupervisor(parts.collectors, parts.learner, COLLECTOR_MAX_RESTARTS, progress, self.come_back_s)

    def close(self) -> None:
        """Kill the run's actors and leave the cluster (a local one started here is shut down)."""
        if self.actors is not None:
            self.actors.kill_all()
        if not self.owns_connection:
            if self.group is not None:
                self.group.release()
            return
        if self.started_local:
            shutdown()
        elif ray.is_initialized():
            disconnect()
