"""The phases of `shipyard demo`, the model lifecycle loop on embedded defaults.

`clock` times the phases and prints the summary; `serving` runs the demo's deployment behind a
router in this process and asks it one OpenAI-API request. `shipyard.cli.demo_job` runs them.
"""
