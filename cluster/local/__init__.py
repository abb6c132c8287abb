"""The local runtime (`raypex train --local`): the run's parts as plain objects in the command's
own process, without Ray."""
