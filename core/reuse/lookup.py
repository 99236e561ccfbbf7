"""Finding the views of a call: its base, dim and gen keys and the confirmed views under them.

The keys leave out the operation's irrelevant arguments (:mod:`.arguments`). A gen key is the
call's shape class, or — once no affine template fits that class — the class refined by the
order of its input extents. Serving tries dim, then base (where no dim view is confirmed:
the dim key turned out data-dependent, or an impure call's dim view has not seen enough
distinct data yet), then gen; learning records a capture under the same keys.
"""

from collections.abc import Sequence

from dslog_dagster.core.provrc import LineageTable
from dslog_dagster.core.relation import Shape
from dslog_dagster.core.reuse.arguments import ArgumentRelevance
from dslog_dagster.core.reuse.keys import (
    Call,
    ShapeClass,
    base_sig,
    dim_sig_cached,
    gen_sig,
    shape_class,
)
from dslog_dagster.core.reuse.persistence import Kind, View, ViewFiles
from dslog_dagster.core.reuse.policy import ReusePolicy
from dslog_dagster.core.reuse.views import TableKey

__all__ = ["ViewFinder"]

# Instantiated gen tables kept per view (by shape).
_INSTANCE_CACHE = 64


class ViewFinder:
    """The keys of calls and the confirmed views under them.

    Args:
        files: the registry's view files.
        arguments: the registry's argument relevance (irrelevant arguments leave the keys).
        policy: which kinds of views are served; ``literal_below`` for shape classes.
    """

    def __init__(self, files: ViewFiles, arguments: ArgumentRelevance, policy: ReusePolicy) -> None:
        self.files = files
        self.arguments = arguments
        self.policy = policy

    def dim_key(self, call: Call) -> str:
        """The call's dim signature (without its irrelevant arguments)."""
        tok = call.token(self.arguments.drop(call.code, call.mode))
        return dim_sig_cached(call.code, call.mode, tok, call.in_shapes)

    def base_key(self, call: Call) -> str | None:
        """The call's base signature, or None when the input contents are unknown."""
        contents = call.contents()
        if contents is None:
            return None
        tok = call.token(self.arguments.drop(call.code, call.mode))
        return str(base_sig(call.code, call.mode, tok, contents))

    def gen_key(self, call: Call, out_shapes: Sequence[Shape]) -> tuple[str, ShapeClass]:
        """The active gen key of a call: its shape class, or — once no affine template fits
        that class — the class refined by the order of its input extents (``convolve`` in
        ``valid`` mode is affine for ``M > N`` and for ``M < N``, not across both)."""
        drop = self.arguments.drop(call.code, call.mode)
        relevant = {k: v for k, v in call.args.items() if k not in drop}
        klass = shape_class(call.in_shapes, out_shapes, relevant, self.policy.literal_below)
        tok = call.token(drop)
        coarse = str(gen_sig(call.code, call.mode, tok, klass.token))
        if not self.files.is_dead(coarse):
            return coarse, klass
        in_syms = [k for k, b in enumerate(klass.bindings) if any(sd == "i" for sd, _, _ in b)]
        order = sorted(in_syms, key=lambda k: klass.values[k])
        refined = klass.token + "|order:" + ",".join(map(str, order))
        return str(gen_sig(call.code, call.mode, tok, refined)), klass

    def find_specific(self, call: Call) -> tuple[Kind, str, View] | None:
        """A confirmed base or dim view for the call (base where no dim view is confirmed:
        the dim key is data-dependent, or an impure call's dim view has not yet seen enough
        distinct data)."""
        if self.policy.dim:
            sig = self.dim_key(call)
            v = self.files.confirmed(sig)
            if v is not None:
                return "dim", sig, v
        return self.find_base(call)

    def find_base(self, call: Call) -> tuple[Kind, str, View] | None:
        """A confirmed base (exact-input) view for the call."""
        if self.policy.base:
            bsig = self.base_key(call)
            v = self.files.confirmed(bsig) if bsig is not None else None
            if bsig is not None and v is not None:
                return "base", bsig, v
        return None

    def gen_instance(
        self, v: View, klass: ShapeClass, call: Call, out_shapes: Sequence[Shape]
    ) -> dict[TableKey, LineageTable] | None:
        """The tables of gen view ``v`` at the call's shapes (cached per view), or None when
        its template does not describe them."""
        if v.template is None:
            return None
        key = (klass.values, tuple(call.in_shapes), tuple(out_shapes))
        inst = v.instances.get(key)
        if inst is None:
            inst = v.template.instantiate(klass.values, call.in_shapes, out_shapes)
            if inst is None:
                return None
            v.instances[key] = inst
            if len(v.instances) > _INSTANCE_CACHE:
                v.instances.popitem(last=False)
        return inst
