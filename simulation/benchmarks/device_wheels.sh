#!/usr/bin/env bash
# The wheels the lent GPU machine lacks, downloaded here into .whl/ (ignored by git) for the device check
# (docs/performance.md#measuring-on-a-lent-gpu): that machine has Python 3.12, torch, torchvision, numpy, scipy,
# pytest and their own needs, but no flwr and no dp-accounting. simulation/benchmarks/device_check.sh installs what
# it finds in .whl/ into a temporary folder there. A call carries at most 64 MiB, the working tree included (see
# simulation/benchmarks/device_tree.sh); this script checks the wheels' share.
#
#   bash simulation/benchmarks/device_wheels.sh            # Python 3.12 wheels for manylinux x86_64
#   PYTHON_VERSION=3.11 bash simulation/benchmarks/device_wheels.sh
#
# The versions are this project's (the ones its own environment resolves); change them here with the environment.
set -eu
cd "$(dirname "$0")/../.."
PYTHON_VERSION=${PYTHON_VERSION:-3.12}
LIMIT_MIB=24  # of the 64 MiB a call carries: the rest is the working tree's
FLOWER="flwr==1.42.0 pycryptodome==3.24.1 cryptography==50.0.2 grpcio-health-checking==1.81.1 iterators==0.0.2
        cffi==2.1.1 pycparser==3.12 grpcio==1.85.3 protobuf==6.33.6"
PRIVACY="dp-accounting==0.6 dm-tree==0.1.10 wrapt"  # absl-py, attrs, mpmath and scipy are there already
mkdir -p .whl
# shellcheck disable=SC2086  # the lists are words on purpose
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_34_x86_64 --platform any -d .whl $FLOWER $PRIVACY
size=$(du -sm .whl | cut -f1)
echo "$(ls .whl | wc -l) wheels in .whl/, ${size} MiB (their share of a call: ${LIMIT_MIB} MiB; carry=['.whl'])"
if [ "$size" -ge "$LIMIT_MIB" ]; then
    echo "device_wheels.sh: .whl/ is ${size} MiB, over the ${LIMIT_MIB} MiB left beside the working tree; remove" \
         "wheels of other versions from .whl/, or leave out the privacy wheels (PRIVACY) if the DP-SGD parts can go" >&2
    exit 1
fi
