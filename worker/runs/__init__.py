"""Run lifecycle: the gate, run creation and claiming, phase execution, step records."""
