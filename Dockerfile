# The one image of every gangway service: `gangway service <name>` picks the service.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY gangway ./gangway
COPY events ./events
COPY services ./services
# ensure_topics creates the topics this file names (the same file docker-compose's `topics` runs).
COPY infra/topics.yaml /etc/gangway/topics.yaml
ENV GANGWAY_TOPICS_FILE=/etc/gangway/topics.yaml
RUN pip install . \
    && useradd --system --uid 10001 --create-home --home-dir /var/lib/gangway gangway

# Snapshots (state plus offset) go to ./.gangway under the working directory; the log stays the truth.
USER 10001
WORKDIR /var/lib/gangway
CMD ["gangway", "--help"]
