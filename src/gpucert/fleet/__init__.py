"""Fleet operations after handover: what gpucert knows of each node now, the Prometheus exporter, scheduled and
on-demand recertification, and `gpucert init`'s draft of a spec from a running cluster."""
