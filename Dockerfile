# syntax=docker/dockerfile:1
# MapSmith with every open stack: the opensource stack with the raster and Whitebox extras, SedonaDB,
# Apache Sedona on Spark (Java 17, the pinned Sedona jars fetched here with Maven, so a running server
# never downloads), and QGIS Processing (qgis_process from Debian, run as a subprocess). ArcGIS Pro is
# Windows-only and not in the image.
#
#   docker build -t mapsmith .                       # the runtime image (the last stage repeats it)
#   docker run -i --rm -v "$PWD:/workspace" mapsmith  # MCP over stdio, the workspace mounted at /workspace
#   docker run --rm -p 127.0.0.1:8765:8765 -v "$PWD:/workspace" -e MAPSMITH_HTTP_TOKEN \
#       mapsmith serve --http --host 0.0.0.0          # Streamable HTTP at /mcp; refuses to start without a token
#   docker build --target test -t mapsmith:test . && docker run --rm mapsmith:test
#                                                    # the every-stack tests (real QGIS, Spark, Chromium)
#
# The base is Debian 12 because its QGIS (3.22), OpenJDK 17 and Python 3.11 are the versions CI tests.

ARG DEBIAN_IMAGE=debian:bookworm-slim

# ---- os: what every stage shares -------------------------------------------------------------------
FROM ${DEBIAN_IMAGE} AS os
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates python3 python3-venv qgis openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*

# ---- build: MapSmith and its Python dependencies into a venv; the Sedona jars with Maven ------------
FROM os AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends maven \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the wheel is built from (pyproject.toml's [tool.hatch.build]), so editing tests or docs
# does not invalidate the dependency layer.
COPY pyproject.toml README.md LICENSE ./
COPY core core
COPY plugins plugins
COPY contracts contracts
RUN python3 -m venv /opt/mapsmith \
 && /opt/mapsmith/bin/pip install --no-cache-dir '.[all]'
# Maven also leaves its own plugins in the repository: the runtime stage copies only the two jars' folders.
ENV MAPSMITH_MAVEN_REPO=/opt/maven-repository
RUN /opt/mapsmith/bin/python -m mapsmith_sedona.jars fetch

# ---- runtime: the image users run ---------------------------------------------------------------
FROM os AS runtime
COPY --from=build /opt/mapsmith /opt/mapsmith
COPY --from=build /opt/maven-repository/org/apache/sedona /opt/maven-repository/org/apache/sedona
COPY --from=build /opt/maven-repository/org/datasyslab /opt/maven-repository/org/datasyslab
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/mapsmith mapsmith \
 && mkdir /workspace \
 && chown mapsmith:mapsmith /workspace
# Every path argument must stay inside /workspace (mount your data there). QGIS's algorithm cache and
# Spark's scratch files go to the unprivileged user's home.
ENV PATH=/opt/mapsmith/bin:$PATH \
    MAPSMITH_WORKSPACE=/workspace \
    MAPSMITH_MAVEN_REPO=/opt/maven-repository \
    PYTHONUNBUFFERED=1
USER mapsmith
WORKDIR /workspace
VOLUME ["/workspace"]
EXPOSE 8765
# No arguments: MCP over stdio (run with -i). `serve --http --host 0.0.0.0` listens on every address,
# which MapSmith allows only with MAPSMITH_HTTP_TOKEN (32+ characters) and a workspace; it exits 2 otherwise.
ENTRYPOINT ["mapsmith"]
CMD []

# ---- test: the every-stack tests in the image, with Chromium for the map panel (only here) -------------
FROM runtime AS test
USER root
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium bubblewrap \
 && rm -rf /var/lib/apt/lists/*
COPY --chown=mapsmith:mapsmith . /src
RUN /opt/mapsmith/bin/pip install --no-cache-dir '/src[test,browser]'
USER mapsmith
WORKDIR /src
ENV MAPSMITH_QGIS_REQUIRED=1 \
    MAPSMITH_SPARK_REQUIRED=1 \
    MAPSMITH_BROWSER_REQUIRED=1
# The tests make their own workspaces; the image's default one would confine them to /workspace.
ENTRYPOINT ["env", "-u", "MAPSMITH_WORKSPACE", "python", "-m", "pytest"]
CMD ["-q", "-rs", "tests/stacks/test_qgis_algorithms.py", "tests/stacks/test_qgis_dual_stack.py", \
     "tests/stacks/test_qgis_mcp.py", \
     "tests/stacks/test_spark_sedona.py", "tests/mapview/test_browser_map_panel.py"]

# The default target is the last stage; make it the runtime image.
FROM runtime
