"""Pure analysis: baselines, robust statistics, straggler detection, health rules. No I/O, no cluster, no GPU."""
