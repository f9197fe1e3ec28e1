"""Deployments of models behind the router: spec, controller, autoscaler and canary.

`load_spec`/`parse_spec` read a deployment spec; `Controller` runs one deployment's replicas and
tells the router about them; `loop.run` is its control loop (autoscaler in `scaling`, canary
rollouts in `rollout`); `decide` (autoscaler) and `judge`/`step` (canary) are the pure policies.
"""

from shipyard.serve.deploy.autoscaler import Decision, Signals, decide
from shipyard.serve.deploy.canary import Rollout, StageMetrics, Verdict, judge, step
from shipyard.serve.deploy.controller import Controller
from shipyard.serve.deploy.spec import DeploymentSpec, load_spec, parse_spec

__all__ = [
    "Controller",
    "Decision",
    "DeploymentSpec",
    "Rollout",
    "Signals",
    "StageMetrics",
    "Verdict",
    "decide",
    "judge",
    "load_spec",
    "parse_spec",
    "step",
]
