# The controller image: what the in-cluster CronJob (`gpucert schedule`) and the metrics exporter (`gpucert metrics`)
# run. No CUDA: the controller plans, waits and evaluates; the probes run in the probe image (deploy/Dockerfile).
# gpucert runs its suites from a checkout, so the image holds one at /opt/gpucert (installed editable), with your
# committed baselines (baselines/gpus/, and the handover baselines in baselines/nodes/). Never your signing key:
# it comes from a Secret. Build from the repository root:
#   docker build -f deploy/controller.Dockerfile -t REGISTRY/gpucert-controller:0.1.0 .
FROM python:3.12-slim

ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /opt/gpucert
COPY pyproject.toml README.md conftest.py ./
COPY src ./src
COPY suites ./suites
COPY fixtures ./fixtures
COPY baselines ./baselines
COPY examples ./examples
RUN pip install -e /opt/gpucert

# nobody, as the probe pods run; the manifests mount an emptyDir at /tmp (HOME) and the reports volume
USER 65534:65534
ENV HOME=/tmp
ENTRYPOINT ["gpucert"]
CMD ["--help"]
