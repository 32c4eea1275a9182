"""Which modules carry hooks, besides the one a loaded model keeps for good: fair share's pass
counter (`fair_share.count_passes`). Everything else an engine or intervention adds must be gone
once it is done."""

from xai_core.infra import fair_share


def hooked_modules(module) -> list[str]:
    """Names of the submodules of `module` with a forward (pre-)hook other than the counter."""
    counter = getattr(module, fair_share.PASS_COUNTER, None)
    return [name for name, m in module.named_modules()
            if m._forward_pre_hooks or any(key != counter for key in m._forward_hooks)]
