"""``ShardOptimizer`` and ``ShardScheduler``: an optimizer that reports skipped AMP steps, and an LR
scheduler that steps once per sample-equivalent of work (``N`` times per optimizer step).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, overload

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import ReduceLROnPlateau

from lightning_shard._checks import check_bool, check_num_processes
from lightning_shard.comm.collectives import world_size

__all__ = ["ShardOptimizer", "ShardScheduler"]

# NOTE: `torch.optim.Optimizer.load_state_dict` decides where the `step` counter lives (CPU unless the
# optimizer is fused or capturable); moving it ourselves would fight that policy.
_KEYS_LEFT_IN_PLACE = frozenset({"step"})


def _forwarded(inner: str, name: str) -> Any:
    """A read-write property that is attribute ``name`` of the wrapped object ``self.<inner>``."""
    return property(
        lambda self: getattr(getattr(self, inner), name),
        lambda self, value: setattr(getattr(self, inner), name, value),
    )


class ShardOptimizer(Optimizer):
    """Wraps ``optimizer`` so that it reports whether its last step was skipped by a ``GradScaler``.

    It is a real ``torch.optim.Optimizer`` (``__init__`` of the base class is not called): every
    attribute, ``param_groups``, ``state`` and the hooks are the inner optimizer's, and ``state_dict()``
    is the inner optimizer's, so a checkpoint holds no trace of the wrapper.

    Args:
        optimizer: the optimizer to wrap.
        device_placement: on ``load_state_dict``, move each parameter's loaded state to that
            parameter's device before the inner optimizer loads it.
        scaler: a ``torch.amp.GradScaler``. When given and enabled, ``step()`` runs
            ``scaler.step(optimizer)`` then ``scaler.update()``, like the reference; unscale the
            gradients (e.g. for clipping) with ``scaler.unscale_(wrapper.optimizer)``.

    Raises:
        TypeError: if ``optimizer`` is not a ``torch.optim.Optimizer``, ``scaler`` is not a
            ``torch.amp.GradScaler`` or ``device_placement`` is not a bool.
    """

    # NOTE: a `GradScaler` handed this wrapper (e.g. by Lightning's precision plugin) must take its
    # generic path: unscale, check for inf/NaN, call `step()` only when finite. Its fused path would put
    # `grad_scale`/`found_inf` on the wrapper, where a fused inner optimizer never sees them.
    _step_supports_amp_scaling = False

    def __init__(
        self,
        optimizer: Optimizer,
        device_placement: bool = True,
        scaler: torch.amp.GradScaler | None = None,
    ) -> None:
        # NOTE: no `super().__init__()`: the base class would create a second, empty set of
        # `param_groups`, `state` and hooks; everything is the inner optimizer's instead.
        if not isinstance(optimizer, Optimizer):
            raise TypeError(
                f"`optimizer` must be a `torch.optim.Optimizer`, got {type(optimizer).__name__}. "
                "Pass the optimizer itself, e.g. `ShardOptimizer(torch.optim.AdamW(model.parameters()))`."
            )
        self.optimizer = optimizer
        self.device_placement = check_bool("device_placement", device_placement)
        if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
            raise TypeError(
                f"`scaler` must be a `torch.amp.GradScaler` or None, got {type(scaler).__name__}. "
                'Pass e.g. `scaler=torch.amp.GradScaler("cuda")`, or `scaler=None` without mixed precision.'
            )
        self.scaler = scaler
        self._step_was_skipped = False

    @property
    def step_was_skipped(self) -> bool:
        """Whether the last ``step()`` was skipped because the scaler found inf/NaN gradients."""
        return self._step_was_skipped

    state = _forwarded("optimizer", "state")
    param_groups = _forwarded("optimizer", "param_groups")
    defaults = _forwarded("optimizer", "defaults")

    # NOTE: the overloads of `Optimizer.step`: no closure gives `None`, a closure its loss.
    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Step the inner optimizer, through the scaler when one is set, and record whether it was skipped.

        Raises:
            ValueError: if a ``closure`` is passed while an enabled ``scaler`` is set.
        """
        if self.scaler is None or not self.scaler.is_enabled():
            self._step_was_skipped = False
            return self.optimizer.step(closure)
        if closure is not None:
            raise ValueError(
                "`ShardOptimizer.step(closure=...)` cannot be used with an enabled `scaler`: the scaler "
                "checks the gradients before the closure would recompute them. Run the forward and "
                "backward pass before `step()`, or pass `scaler=None`."
            )
        with self.watch_scaler(self.scaler):
            result = self.scaler.step(self.optimizer)
            self.scaler.update()
        return result

    @contextmanager
    def watch_scaler(self, scaler: torch.amp.GradScaler) -> Iterator[None]:
        """Record as ``step_was_skipped`` whether ``scaler`` skipped a step inside the ``with`` block.

        For code that drives the scaler itself (``scaler.step(wrapper)`` then ``scaler.update()``,
        as Lightning's precision plugin does) instead of passing it as ``scaler``.
        """
        # NOTE: public API only. `update()` multiplies the scale by `backoff_factor` (< 1, enforced by
        # GradScaler) after inf/NaN and never lowers it otherwise; unlike watching for calls of the
        # inner `step`, this also holds for fused optimizers, whose `step` runs and skips internally.
        before = scaler.get_scale()
        yield
        self._step_was_skipped = scaler.get_scale() < before

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load ``state_dict`` into the inner optimizer, first moving it to the parameters' devices
        when ``device_placement`` is set."""
        if self.device_placement:
            state_dict = _placed_on_param_devices(state_dict, self.optimizer.param_groups)
        self.optimizer.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        # NOTE: reached only for names the wrapper lacks: custom optimizer attributes (`train`, `eval`)
        # and the hook dicts that `Optimizer.register_*_hook` use, so hooks land on the inner optimizer.
        if name == "optimizer" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    def __getstate__(self) -> dict[str, Any]:
        # NOTE: a scheduler built on the wrapper patches an unpicklable `step` onto the instance; like
        # `Optimizer.__getstate__`, keep only the real state.
        keys = ("optimizer", "device_placement", "scaler", "_step_was_skipped")
        return {key: self.__dict__[key] for key in keys}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.optimizer!r})"


class ShardScheduler:
    """Wraps an LR scheduler so that it steps as often as the samples seen call for.

    With ``step_with_optimizer=True`` each ``step()`` steps the inner scheduler ``num_processes``
    times (once with ``split_batches=True``: the global batch is then the user's batch), not at all
    when a wrapped ``ShardOptimizer`` reports ``step_was_skipped``, and never past the ``total_steps``
    of a scheduler that has one (``OneCycleLR``). With ``step_with_optimizer=False`` each ``step()``
    steps the inner scheduler exactly once. Everything else (``state_dict``, ``get_last_lr``,
    ``last_epoch``, ...) is the inner scheduler's.

    Args:
        scheduler: the LR scheduler to wrap.
        optimizers: the optimizer(s) that ``scheduler`` follows; only ``ShardOptimizer`` ones can
            report skipped steps.
        step_with_optimizer: tie scheduler steps to optimizer steps as described above.
        split_batches: whether the loaders split the user's batch across processes.
        num_processes: the number of data-parallel processes ``N``; ``None`` reads the world size of
            ``torch.distributed`` once, here (1 when it is not initialised).

    Raises:
        TypeError: if an argument has the wrong type.
        ValueError: if ``num_processes < 1``, or ``scheduler`` is a ``ReduceLROnPlateau`` with
            ``step_with_optimizer=True``.
    """

    def __init__(
        self,
        scheduler: Any,
        optimizers: Optimizer | Sequence[Optimizer],
        step_with_optimizer: bool = True,
        split_batches: bool = False,
        num_processes: int | None = None,
    ) -> None:
        self.step_with_optimizer = check_bool("step_with_optimizer", step_with_optimizer)
        self.split_batches = check_bool("split_batches", split_batches)
        if isinstance(scheduler, Optimizer):
            raise TypeError(
                f"`scheduler` must be an LR scheduler, got the optimizer {type(scheduler).__name__}; the "
                "arguments may be swapped. Pass `ShardScheduler(scheduler, optimizers)`, e.g. with a `LambdaLR`."
            )
        if not callable(getattr(scheduler, "step", None)):
            raise TypeError(
                f"`scheduler` must be an LR scheduler with a `step()` method, got {type(scheduler).__name__}. "
                "Pass e.g. a `torch.optim.lr_scheduler.LambdaLR`."
            )
        if self.step_with_optimizer and isinstance(scheduler, ReduceLROnPlateau):
            raise ValueError(
                "`ReduceLROnPlateau` steps on a monitored metric, not per optimizer step, so it cannot be "
                "scaled with `step_with_optimizer=True`. Pass `step_with_optimizer=False`, or step it yourself."
            )
        self.scheduler = scheduler
        self.optimizers = list(optimizers) if isinstance(optimizers, (list, tuple)) else [optimizers]
        for optimizer in self.optimizers:
            if not isinstance(optimizer, Optimizer):
                raise TypeError(
                    f"`optimizers` must be an optimizer or a list of optimizers, got an element of type "
                    f"{type(optimizer).__name__}. Pass the optimizer(s) the scheduler follows, e.g. the "
                    "`ShardOptimizer` wrapping it."
                )
        self.num_processes = check_num_processes(world_size() if num_processes is None else num_processes)

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Step the inner scheduler as the class docstring describes; arguments are passed through."""
        if not self.step_with_optimizer:
            self.scheduler.step(*args, **kwargs)
            return
        if any(getattr(optimizer, "step_was_skipped", False) for optimizer in self.optimizers):
            return
        # NOTE: `OneCycleLR.get_lr` raises once `last_epoch` exceeds `total_steps`, and `step()`
        # increments `last_epoch` before calling it, so `last_epoch == total_steps` is the last state.
        total_steps = getattr(self.scheduler, "total_steps", None)
        for _ in range(1 if self.split_batches else self.num_processes):
            if total_steps is not None and self.scheduler.last_epoch >= total_steps:
                return
            self.scheduler.step(*args, **kwargs)

    last_epoch = _forwarded("scheduler", "last_epoch")

    def __getattr__(self, name: str) -> Any:
        # NOTE: `state_dict`, `load_state_dict`, `get_last_lr`, `optimizer` (what Lightning's
        # `LearningRateMonitor` reads), ... are the inner scheduler's.
        if name == "scheduler" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.scheduler, name)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.scheduler!r}, step_with_optimizer={self.step_with_optimizer}, "
            f"split_batches={self.split_batches}, num_processes={self.num_processes})"
        )


def _placed_on_param_devices(
    state_dict: dict[str, Any], param_groups: list[dict[str, Any]]
) -> dict[str, Any]:
    """Return ``state_dict`` with each parameter's state moved to that parameter's device; saved ids pair with
    the parameters in group order, as in ``Optimizer.load_state_dict`` (ids without one are left alone)."""
    saved_ids = itertools.chain.from_iterable(group["params"] for group in state_dict.get("param_groups", []))
    params = itertools.chain.from_iterable(group["params"] for group in param_groups)
    # NOTE: `strict=False`: on a size mismatch `Optimizer.load_state_dict` raises its own, clearer error.
    devices = {saved_id: param.device for saved_id, param in zip(saved_ids, params, strict=False)}
    state = {
        key: _to_device(value, devices[key], _KEYS_LEFT_IN_PLACE) if key in devices else value
        for key, value in state_dict.get("state", {}).items()
    }
    return {**state_dict, "state": state}


def _to_device(value: Any, device: torch.device, left: frozenset[str] = frozenset()) -> Any:
    """``value`` with its tensors on ``device``, except the top-level keys ``left`` of a dict."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {key: item if key in left else _to_device(item, device) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(item, device) for item in value)
    return value
