"""Where `raypex bench` runs its Ray stages: a fresh local cluster, or the cluster a user keeps up
and names with --address or RAYPEX_ADDRESS (as `raypex train` joins it)."""

from __future__ import annotations

from raypex.cluster.config.arguments import UsageError
from raypex.cluster.driver.progress import ProgressLine


def checked_address(given: str | None, soak: bool) -> str | None:
    """The cluster the stages join (`given`, the --address, else RAYPEX_ADDRESS; None: a local
    one), checked to answer before anything is measured (UsageError in one line when it does
    not). A soak starts its own whatever is given."""
    from raypex.cluster.ray_runtime.address import (
        ConnectError,
        check_gcs_auth,
        check_gcs_port,
        connect_error_line,
        kept_up_address,
    )

    address = given if given is not None else kept_up_address()
    if address is None or soak:
        return address
    try:
        check_gcs_port(address)
        check_gcs_auth(address)
    except ConnectError as err:
        raise UsageError(connect_error_line(err, from_variable=given is None)) from None
    return address


def bench_on_a_cluster(config, spec, progress: ProgressLine, address: str | None):
    """A ClusterBench for the device `raypex train` would choose, on a fresh local Ray cluster or
    (`address`) on the cluster there. UsageError, with Ray left again, when the address does not
    answer or the config asks for a device or more CPUs than the cluster has: said before any
    stage runs, not when the first one asks Ray for them. On a joined cluster every node's software
    is checked against this process's first, as `raypex train` checks it (cluster/ray_runtime/versions.py)."""
    from raypex.cluster.bench.ray_stages import ClusterBench
    from raypex.cluster.ray_runtime.address import ConnectError
    from raypex.cluster.ray_runtime.devices import choose_act_device, choose_device, with_act_device
    from raypex.cluster.ray_runtime.placement import check_fits
    from raypex.cluster.driver.run_errors import PlacementError
    from raypex.cluster.ray_runtime.versions import VersionMismatch, ask_every_node_versions, check_node_versions
    from raypex.cluster.ray_runtime.wiring import (
        check_local_cluster_holds,
        cluster_gpus,
        connect,
        disconnect,
        node_resources,
        resource_request,
        shutdown,
    )

    try:
        if address is None:
            check_local_cluster_holds(config)
        else:
            progress.message(f"bench: joining the Ray cluster at {address}")
        started_local = connect(address, say=progress.message)
    except (ConnectError, PlacementError) as err:
        raise UsageError(str(err)) from None
    leave = shutdown if started_local else disconnect
    try:
        if not started_local:
            check_node_versions(ask_every_node_versions())
        device = choose_device(config, cluster_gpus(), progress, len(spec.obs_shape) == 1)
        nodes = node_resources()
        config = with_act_device(config, choose_act_device(config, nodes, device, len(spec.obs_shape) == 3, progress))
        check_fits(resource_request(config, device), nodes)
    except (PlacementError, VersionMismatch) as err:
        leave()
        raise UsageError(str(err)) from None
    return ClusterBench(config, spec, progress, device, leave)
