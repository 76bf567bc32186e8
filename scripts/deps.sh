#!/usr/bin/env bash
# Installs the Debian 12 packages libnexar needs to build and test, if missing.
set -eu
pkgs="build-essential cmake pkg-config libngtcp2-dev libngtcp2-crypto-gnutls-dev libgnutls28-dev
      clang clang-format libclang-rt-14-dev nftables iproute2 python3 python3-dev python3-numpy python3-pytest
      libpmix-dev openmpi-bin mpich slurmctld slurmd slurm-client munge python3-torch"
# libpmix-dev: PMIx headers for the PMIx launcher path (libpmix itself is
# loaded at run time). openmpi-bin, mpich, slurm*, munge, python3-torch: the
# real launchers the launcher.* tests start (mpirun.openmpi, mpiexec.mpich,
# srun, torchrun). mpich and openmpi both provide the mpirun alternative; the
# tests call them by their full names.
# the torch.distributed backend (nexar.torch) and its tests
pkgs="$pkgs libtorch-dev pybind11-dev ninja-build"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
