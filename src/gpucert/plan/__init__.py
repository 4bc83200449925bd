"""What a run must do and where it keeps it: the check vocabulary, the inventory, the checks a spec requires, the run
folder (every file name and the run id), and the entry point that plans and measures."""
