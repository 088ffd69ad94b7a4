# Sourced by scripts/build-image and scripts/k8s-cluster: the machine's container image builder
# (Docker when its daemon answers, else buildah, else podman; TFOS_IMAGE_BUILDER chooses) and what
# both do with it. Sets `builder`; needs `die` from the sourcing script.

builder="${TFOS_IMAGE_BUILDER:-}"
if [[ -z "$builder" ]]; then
  if command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1; then builder=docker
  elif command -v buildah >/dev/null; then builder=buildah
  elif command -v podman >/dev/null; then builder=podman
  else die "no image builder: install Docker, buildah or podman (Debian: apt-get install buildah)"
  fi
fi
case $builder in docker | buildah | podman) ;; *) die "TFOS_IMAGE_BUILDER=$builder: expected docker, buildah or podman" ;; esac

# buildah and podman: containers get limits within this shell's hard ones (the library's defaults
# can exceed what a container host allows; the library itself caps RLIMIT_NPROC at 32768 without
# CAP_SYS_RESOURCE) and runc (crun refuses hybrid cgroup hierarchies).
if [[ $builder != docker && -z "${CONTAINERS_CONF:-}" ]]; then
  _conf_dir="${XDG_CACHE_HOME:-$HOME/.cache}/tfos-image"
  mkdir -p "$_conf_dir"
  _nofile="$(ulimit -Hn)" _nproc="$(ulimit -Hu)"
  [[ $_nofile == unlimited ]] && _nofile=1048576
  [[ $_nproc == unlimited || $_nproc -gt 32768 ]] && _nproc=32768
  printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n[engine]\nruntime = "runc"\n' \
    "$_nofile" "$_nofile" "$_nproc" "$_nproc" >"$_conf_dir/containers.conf"
  export CONTAINERS_CONF="$_conf_dir/containers.conf"
fi

has_image() { # NAME
  case $builder in
    docker) docker image inspect "$1" >/dev/null 2>&1 ;;
    buildah) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
    podman) podman image exists "$1" ;;
  esac
}

image_id() { # NAME: the image's ID (its config digest)
  case $builder in
    docker) docker image inspect --format '{{.Id}}' "$1" ;;
    buildah) buildah inspect --type image --format '{{.FromImageID}}' "$1" ;;
    podman) podman image inspect --format '{{.Id}}' "$1" ;;
  esac
}

build_image() { # build arguments (as for `docker build`)...
  case $builder in
    docker) docker build "$@" ;;
    buildah) buildah bud --network=host --isolation chroot --layers "$@" ;;
    podman) podman build --network=host --isolation chroot --layers "$@" ;;
  esac
}

save_image() { # NAME FILE: a docker-archive of the image, for `ctr images import`
  case $builder in
    docker) docker save -o "$2" "$1" ;;
    buildah) buildah push --quiet "$1" "docker-archive:$2:$1" ;;
    podman) podman save --quiet --format docker-archive -o "$2" "$1" ;;
  esac
}

import_rootfs() { # TAR NAME: an image from a root file system archive
  local env=('ENV LANG=C.UTF-8' 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' 'CMD ["python3"]')
  local changes=() c container
  for c in "${env[@]}"; do changes+=(--change "$c"); done
  case $builder in
    docker) docker import "${changes[@]}" "$1" "$2" >/dev/null ;;
    podman) podman import "${changes[@]}" "$1" "$2" >/dev/null ;;
    buildah)
      container="$(buildah from scratch)"
      buildah add --quiet "$container" "$1" / >/dev/null
      buildah config --env LANG=C.UTF-8 --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd python3 "$container"
      buildah commit --quiet "$container" "$2" >/dev/null
      buildah rm "$container" >/dev/null
      ;;
  esac
}
