"""RL post-training: rollout workers, a trajectory buffer, a reward service, GRPO, weight sync.

    cfg = load_config("rl.yaml")          # or RLConfig.from_dict({...})
    controller = Controller(cfg)
    controller.prepare()                  # supervised warm-up, pools started
    try:
        controller.run()
    finally:
        controller.close()
    print(report(controller))

See docs/rl.md.
"""

from shipyard.rl.config import RLConfig, load_config
from shipyard.rl.controller import Controller
from shipyard.rl.report import metrics_text, report
from shipyard.rl.verifiers import score

__all__ = ["Controller", "RLConfig", "load_config", "metrics_text", "report", "score"]
