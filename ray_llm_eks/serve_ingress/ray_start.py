"""The Ray head's `ray start`, with the GCS store's password in no process's arguments.

KubeRay 1.7 writes the password into the head's start command (`--redis-password=$REDIS_PASSWORD`,
ray-operator common/pod.go configureGCSFaultTolerance), and Ray 2.58 hands it on as arguments: to the
gcs_server (`--redis_password=`, ray/_private/services.py start_gcs_server) and, inside the raylet's worker
commands, to every worker (`--redis-password=`, `-Dray.redis.password=`, start_raylet). Arguments are what
`ps` shows and what the dashboard's node summary returns (`GET /nodes?view=summary`, each process's cmdline).

Here the head's container runs this module instead of KubeRay's command (the pod template's
`ray.io/overwrite-container-cmd`, which makes KubeRay leave the command alone and hand its own over in
KUBERAY_GEN_RAY_START_CMD: common/pod.go BuildPod). It runs that command's `ray start` in this process, the
password taken from REDIS_PASSWORD (the Secret KubeRay names there) and out of the environment its children
inherit, with two changes to how Ray starts its processes: the gcs_server reads the password from its
environment (gflags' own `--tryfromenv=redis_password` and FLAGS_redis_password, which gcs_server's flag parser
takes), and the raylet gets none (the workers never use it: only the head's GCS talks to the store). Ray's client
server already takes it from its environment (services.py start_ray_client_server, RAY_REDIS_PASSWORD).

Run by the head's container as `python ray_start.py`; the rest of the shipped modules need none of it."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping

GENERATED_ENV = "KUBERAY_GEN_RAY_START_CMD"  # KubeRay 1.7 utils/constant.go
PASSWORD_ENV = "REDIS_PASSWORD"  # KubeRay 1.7 utils/constant.go REDIS_PASSWORD, from the stack's Secret
PASSWORD_FLAG = "--redis-password"
GCS_FLAG = "redis_password"  # gcs_server's gflags flag (start_gcs_server: --redis_password=)


def ray_arguments(generated: str, environ: Mapping[str, str]) -> tuple[list[str], str | None]:
    """KubeRay's `ray start ...` as the ray CLI's arguments (the shell's `$VAR`s expanded, as bash would), less the
    password flag, and the password (None: the command names none)."""
    words = shlex.split(generated)
    if words[:2] != ["ray", "start"]:
        raise SystemExit(f"{GENERATED_ENV} is not a ray start command: {generated[:80]!r}")
    kept, password = [], None
    for word in words[1:]:
        if word == PASSWORD_FLAG or word.startswith(f"{PASSWORD_FLAG}="):
            password = environ.get(PASSWORD_ENV) or None
            continue
        kept.append(os.path.expandvars(word))
    return kept, password


def keep_password_out_of_arguments(password: str) -> None:
    """Ray's process starters, changed so that the password reaches the gcs_server through its environment
    only, and no other process at all."""
    from ray._private import services

    start_gcs, start_raylet, start_process = (
        services.start_gcs_server,
        services.start_raylet,
        services.start_ray_process,
    )

    def gcs_server(*args, redis_password=None, **kwargs):
        def process(command, process_type, **options):
            env = {**(options.pop("env_updates", None) or {}), f"FLAGS_{GCS_FLAG}": password}
            return start_process([*command, f"--tryfromenv={GCS_FLAG}"], process_type, env_updates=env, **options)

        services.start_ray_process = process
        try:
            return start_gcs(*args, redis_password=None, **kwargs)
        finally:
            services.start_ray_process = start_process

    def raylet(*args, redis_password=None, **kwargs):
        return start_raylet(*args, redis_password=None, **kwargs)

    services.start_gcs_server, services.start_raylet = gcs_server, raylet


def main() -> None:
    arguments, password = ray_arguments(os.environ[GENERATED_ENV], os.environ)
    os.environ.pop(PASSWORD_ENV, None)  # the raylet, the dashboard and every worker inherit this environment
    if password is not None:
        keep_password_out_of_arguments(password)
        arguments += [PASSWORD_FLAG, password]  # this process's own argument list, not its command line
    from ray.scripts.scripts import main as ray_main

    sys.argv = ["ray", *arguments]
    ray_main()


if __name__ == "__main__":
    main()
