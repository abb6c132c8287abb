"""The Ray runtime: connecting to a cluster (or starting a local one and its watchdog), choosing
devices, reserving placement groups, starting every part as an actor, supervising the collectors'
loops. The only package of the driver that imports Ray."""
