"""The parameters' gradients inside a compiled backward: each parameter stepped by the user's
optimizer as soon as its gradient is complete ("optimizer in backward"), its gradient freed.

A compiled backward graph returns every parameter's gradient at its end, so all of them are
alive at once as it returns (fp32: as many bytes as the parameters), whatever the plan does
with the saved values. Given the optimizer (``JointBackend(memory_budget, optimizer=opt)``),
the budget path lowers each parameter's gradient into a runtime call instead:
``hector::step_parameter(grad, owner, slot, after)`` right after the backward node completing
the gradient and every backward node reading the parameter (``after``: the readers, so the
parameter changes only once the backward no longer needs its old value), and the graph
returns None for that gradient. The call runs the user's optimizer on that one parameter
(:meth:`OptimizerInBackward.step`: an optimizer of the user's class over the one parameter,
with the hyperparameters of the user's parameter group at that moment and the user's
optimizer's own ``state``), then drops the gradient: the compiled code frees its buffer after
its last use, the call. This is PyTorch's documented "optimizer in backward" pattern
(``Tensor.register_post_accumulate_grad_hook``) done inside the compiled graph, where that
hook comes too late (the graph has made every gradient by the time autograd accumulates one).

The user's loop is unchanged: ``loss.backward()`` steps the parameters, ``optimizer.step()``
(which finds their ``.grad`` None and skips them) ends the step, ``optimizer.zero_grad()``
does nothing to them. The result is the same as the keep-all run's: the same per-parameter
update (PyTorch's CPU optimizers run per parameter by default), in the same order per
parameter; the parameters after N steps are equal bit for bit where nothing is recomputed.
A parameter's ``.grad`` is None after the backward (it was consumed); one already holding a
gradient gets the new one accumulated into it first, as autograd would. Stepping a parameter
a second time before ``optimizer.step()`` ran (gradient accumulation over several backward
passes, or a parameter read by two compiled graphs) raises :class:`GradientStepError` rather
than updating it twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from . import memory_timeline
from .joint_liveness import is_view

__all__ = [
    "GradientStep",
    "GradientStepError",
    "OptimizerInBackward",
    "lower_gradient_steps",
    "step_parameter",
]


class GradientStepError(RuntimeError):
    """A parameter stepped in the backward twice before ``optimizer.step()`` ended the step."""


@dataclass
class _Slot:
    param: torch.Tensor
    group: dict[str, Any]
    sub: torch.optim.Optimizer
    stepped: int = -1  # the step (count of the user's optimizer.step calls) it was stepped in


@dataclass(frozen=True)
class GradientStep:
    """One parameter stepped inside a compiled backward.

    Attributes:
        slot: its slot in :class:`OptimizerInBackward`.
        primal: the joint graph's input it is (``primals_N``).
        gradient: the backward node completing its gradient (no longer a graph output).
        nbytes: its gradient's bytes.
    """

    slot: int
    primal: str
    gradient: str
    nbytes: int


_OWNERS: list[OptimizerInBackward] = []


class OptimizerInBackward:
    """The user's optimizer, run per parameter inside compiled backward graphs.

    Args:
        optimizer: a ``torch.optim.Optimizer`` over the model's parameters (any class whose
            constructor takes a list of parameter groups; its hyperparameters are read from
            the parameter's group at every step, so a learning-rate scheduler applies).
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {optimizer!r}")
        self.optimizer = optimizer
        self._slots: list[_Slot] = []
        self._by_param: dict[int, int] = {}
        self._steps = 0  # the user's optimizer.step() calls so far
        optimizer.register_step_post_hook(self._ended)
        self.owner = len(_OWNERS)
        _OWNERS.append(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> OptimizerInBackward:
        """Itself: a copy would copy the optimizer and every parameter."""
        return self

    def _ended(self, *_: Any) -> None:
        self._steps += 1

    def slots(self, inputs: Sequence[Any]) -> list[int | None]:
        """The slot of each of a graph's ``inputs`` (None: not a parameter the optimizer
        steps, or one that does not require a gradient)."""
        groups = {id(p): g for g in self.optimizer.param_groups for p in g["params"]}
        out: list[int | None] = []
        for x in inputs:
            group = groups.get(id(x))
            if group is None or not isinstance(x, torch.Tensor) or not x.requires_grad:
                out.append(None)
                continue
            slot = self._by_param.get(id(x))
            if slot is None:
                slot = self._by_param[id(x)] = len(self._slots)
                self._slots.append(_Slot(x, group, self._sub_optimizer(x, group)))
            out.append(slot)
        return out

    def _sub_optimizer(self, param: torch.Tensor, group: dict[str, Any]) -> torch.optim.Optimizer:
        hyper = {k: v for k, v in group.items() if k != "params"}
        kind: Any = type(self.optimizer)  # the user's class: its own constructor
        sub: torch.optim.Optimizer = kind([{"params": [param], **hyper}])
        sub.state = self.optimizer.state  # one state (Adam's moments ...), the user's
        return sub

    def step(self, slot: int, grad: torch.Tensor) -> None:
        """Step slot ``slot``'s parameter with ``grad`` (accumulated into its ``.grad`` if it
        holds one), then drop its ``.grad``."""
        s = self._slots[slot]
        if s.stepped == self._steps:
            raise GradientStepError(
                f"parameter {tuple(s.param.shape)} stepped twice in one optimizer step: "
                "gradient accumulation over several backward passes, or a parameter read by "
                "two compiled graphs, cannot step the optimizer in the backward"
            )
        s.stepped = self._steps
        p = s.param
        with torch.no_grad():
            if p.grad is None:
                p.grad = grad
            else:
                p.grad += grad
            s.sub.param_groups[0].update({k: v for k, v in s.group.items() if k != "params"})
            s.sub.step()
        p.grad = None


@torch.library.custom_op("hector::step_parameter", mutates_args=("grad",))
def step_parameter(grad: torch.Tensor, owner: int, slot: int, after: list[torch.Tensor]) -> None:
    """Step parameter ``slot`` of :class:`OptimizerInBackward` ``owner`` with ``grad``
    (declared mutated: the call consumes it, and so stays in the compiled graph); ``after``,
    the backward's readers of the parameter, order it after them."""
    _OWNERS[owner].step(slot, grad)
    memory_timeline.note(f"step {slot}")


@step_parameter.register_fake
def _step_fake(grad: torch.Tensor, owner: int, slot: int, after: list[torch.Tensor]) -> None:
    return None


def _aliases(fw: fx.GraphModule, primal: str) -> set[str]:
    """The forward's nodes that are views of input ``primal`` (itself included)."""
    names = {primal}
    for node in fw.graph.nodes:
        if is_view(node) and node.all_input_nodes and node.all_input_nodes[0].name in names:
            names.add(node.name)
    return names


def _readers(bw: fx.GraphModule, names: set[str]) -> list[fx.Node]:
    """The backward's nodes reading a value named in ``names`` (placeholders: the parameter,
    saved views of it) or a view of one, views followed to their own readers."""
    held = {n for n in bw.graph.nodes if n.op == "placeholder" and n.name in names}
    readers: list[fx.Node] = []
    for node in bw.graph.nodes:
        if node.op != "call_function" or not any(a in held for a in node.all_input_nodes):
            continue
        if is_view(node) and node.all_input_nodes[0] in held:
            held.add(node)
        elif isinstance(node.meta.get("val"), torch.Tensor):
            readers.append(node)
        else:  # a tuple (native_layer_norm_backward's): its getitems are what later nodes read
            readers.extend(u for u in node.users if isinstance(u.meta.get("val"), torch.Tensor))
    return readers


def _nbytes(node: fx.Node) -> int:
    val = node.meta.get("val")
    return val.numel() * val.element_size() if isinstance(val, torch.Tensor) else 0


def lower_gradient_steps(
    fw: fx.GraphModule,
    bw: fx.GraphModule,
    primals: Sequence[str],
    slots: Sequence[int | None],
    owner: OptimizerInBackward,
) -> list[GradientStep]:
    """Rewrite ``bw`` so each gradient of a ``primals`` input with a slot goes to
    ``hector::step_parameter`` where it is complete and the parameter is no longer read, and
    the graph returns None for it. ``primals`` are the joint graph's inputs in order (the
    backward's outputs follow them); their ``slots`` from :meth:`OptimizerInBackward.slots`."""
    out = next(n for n in bw.graph.nodes if n.op == "output")
    grads = list(out.args[0])
    if len(grads) < len(primals) or len(primals) != len(slots):
        return []
    order = {n: i for i, n in enumerate(bw.graph.nodes)}
    counts: dict[Any, int] = {}
    for g in grads:
        counts[g] = counts.get(g, 0) + 1
    steps: list[GradientStep] = []
    for k, (primal, slot) in enumerate(zip(primals, slots, strict=True)):
        grad = grads[k]
        if slot is None or not isinstance(grad, fx.Node) or counts[grad] > 1:
            continue
        if grad.op != "call_function":  # an incoming gradient returned as it is
            continue
        after = _readers(bw, _aliases(fw, primal))
        last = max([grad, *after], key=order.__getitem__)
        with bw.graph.inserting_after(last):
            call = bw.graph.call_function(
                torch.ops.hector.step_parameter.default, (grad, owner.owner, slot, after)
            )
        call.meta["val"] = None
        grads[k] = None
        steps.append(GradientStep(slot, primal, grad.name, _nbytes(grad)))
    out.args = (tuple(grads),)
    bw.recompile()
    return steps
