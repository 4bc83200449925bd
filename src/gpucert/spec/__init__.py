"""Models of the documents users write (ClusterSpec and its pools, baselines, handover baselines, the simulated
fleet) and the one reader that turns YAML into them with errors naming file, key and line. No cluster, no GPU."""
