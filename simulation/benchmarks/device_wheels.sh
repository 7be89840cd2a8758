#!/usr/bin/env bash
# The wheels the lent GPU machine lacks, downloaded here into .whl/ (ignored by git) for the device check
# (docs/performance.md#measuring-on-a-lent-gpu): that machine has Python 3.12, torch, torchvision and numpy, but no
# flwr, no pytest and no dp-accounting. simulation/benchmarks/device_check.sh installs what it finds in .whl/ into a
# temporary folder there; a call carries at most 64 MiB of ignored files, which this script checks.
#
#   bash simulation/benchmarks/device_wheels.sh            # Python 3.12 wheels for manylinux x86_64
#   PYTHON_VERSION=3.11 bash simulation/benchmarks/device_wheels.sh
#
# The versions are this project's (the ones its own environment resolves); change them here with the environment.
set -eu
cd "$(dirname "$0")/../.."
PYTHON_VERSION=${PYTHON_VERSION:-3.12}
LIMIT_MIB=64
FLOWER="flwr==1.42.0 pycryptodome==3.24.1 cryptography==50.0.2 grpcio-health-checking==1.81.1 iterators==0.0.2
        cffi==2.1.1 pycparser==3.12 grpcio==1.85.3 protobuf==6.33.6"
TESTS="pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 packaging==25.0 pygments==2.21.0"
PRIVACY="dp-accounting==0.6 absl-py==2.5.1 attrs==23.2.0 dm-tree==0.1.10 mpmath==1.3.0 wrapt scipy==1.17.1"
mkdir -p .whl
# shellcheck disable=SC2086  # the lists are words on purpose
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_34_x86_64 --platform any -d .whl $FLOWER $TESTS $PRIVACY
size=$(du -sm .whl | cut -f1)
echo "$(ls .whl | wc -l) wheels in .whl/, ${size} MiB (a call carries at most ${LIMIT_MIB} MiB: carry=['.whl'])"
if [ "$size" -ge "$LIMIT_MIB" ]; then
    echo "device_wheels.sh: .whl/ is ${size} MiB, over the ${LIMIT_MIB} MiB a call carries; leave out the privacy" \
         "wheels (PRIVACY) if the DP-SGD part can go" >&2
    exit 1
fi
