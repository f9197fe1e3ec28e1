"""The serving router: one OpenAI-compatible endpoint in front of many replicas.

Picks a replica by model, adapter and prompt prefix (consistent hashing under bounded load,
session and adapter affinity), splits traffic between a deployment's versions by a hash of the
request id, mirrors a fraction to a shadow version, and retries elsewhere a request whose replica
died before streaming. See docs/serving-routing.md.
"""

from shipyard.serve.router.app import RouterConfig, create_app
from shipyard.serve.router.client import RouterClient
from shipyard.serve.router.ring import Ring, load_cap
from shipyard.serve.router.spec import DeploymentSpec, parse_deployment

__all__ = [
    "DeploymentSpec",
    "Ring",
    "RouterClient",
    "RouterConfig",
    "create_app",
    "load_cap",
    "parse_deployment",
]
