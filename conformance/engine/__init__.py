"""The conformance suite's engine (conformance/README.md): runs the scenarios of
``conformance/scenarios/`` with the drivers of ``conformance/drivers/`` against real
servers, with real network faults from Toxiproxy. ``python -m conformance.engine --help``."""
