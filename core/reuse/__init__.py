"""Provenance views: predict, confirm, serve and verify reusable lineage.

Start at :class:`ViewRegistry`: ``reg.capture(func, *arrays, **kwargs)`` is
:func:`~dslog_dagster.core.capture.capture` served from a view when one matches, and
``reg.with_options(mode=..., on_lost=..., need=..., code_version=...)`` sets the capture's
options apart from the function's keywords (:class:`RegistryCapture`).

**Keys** (:mod:`.keys`): every call of an operation has a *dim* key (code identity, mode,
relevant arguments, input shapes), a *gen* key (the same with the shape class instead of the
shapes) and, for operations whose dim key turned out to be data-dependent, a *base* key (the
input contents). A key maps to one view file ``<store>/views/<signature>.json``
(:mod:`.persistence`); lookup (:mod:`.lookup`) is one dict access (plus one file read the
first time a key is seen), so it does not depend on the number of views.

**Views** (:mod:`.views`): a base or dim view is the ProvRC tables of one call; a gen view is a
template whose endpoints are affine in the extents of a shape class.

**Prediction** (:mod:`.prediction`, ICDE VI-C, thesis 5.2.3). After a capture the registry
records a *candidate* under each key. ``m`` matching captures (``ReusePolicy.confirm_after``)
confirm it; one mismatch marks the key non-reusable for good. Before a view is confirmed it is
probed with synthetic inputs of the same shape (:mod:`.probes`), which expose data-dependent
lineage; a view that differs only on NaN inputs is *finite-only*, one that differs only where
an input is exactly 0 is *nonzero-only*.

**Two relations** (``with_options(mode="considered")``). A considered-mode capture is learnt
under two key families: views of both relations (serving ``need="all"``) and views of the considered
relation alone (key mode ``considered-only``, serving ``need="considered"``). A pick by
comparison or a sort has a data-dependent contributing relation but a shape-determined
considered one, so only the second family confirms for it.

**Serving** (:mod:`.serving`): base, then dim, then gen. The function runs on plain float64
inputs, the lineage comes from the view. A view is verified (:mod:`.verification`) before it
is trusted for a call whose exact shapes and argument values it has not been checked on, and
afterwards on a random sample of calls within a time budget. A failed check demotes the view,
issues :class:`~dslog_dagster.errors.ViewMismatchWarning` and captures the call instead.

**Irrelevant arguments** (:mod:`.arguments`, thesis 5.2.4) are dropped from an operation's
keys once confirmed views show they do not change its lineage.

**Concurrency.** View files are written atomically and demotion markers are create-only
(:mod:`.persistence`): processes sharing a store can delay a confirmation, never lose a
demotion.

The layers, top-down: :mod:`.registry` → :mod:`.serving` / :mod:`.prediction` /
:mod:`.probes` → :mod:`.verification` / :mod:`.lookup` → :mod:`.arguments` →
:mod:`.persistence` → :mod:`.views` / :mod:`.keys` / :mod:`.policy` →
:mod:`dslog_dagster.core.capture`.
"""

from dslog_dagster.core.reuse.keys import Unsignable as Unsignable
from dslog_dagster.core.reuse.keys import base_sig as base_sig
from dslog_dagster.core.reuse.keys import code_identity as code_identity
from dslog_dagster.core.reuse.keys import dim_sig as dim_sig
from dslog_dagster.core.reuse.keys import gen_sig as gen_sig
from dslog_dagster.core.reuse.persistence import ViewInfo as ViewInfo
from dslog_dagster.core.reuse.policy import ReusePolicy as ReusePolicy
from dslog_dagster.core.reuse.registry import DeclaredHit as DeclaredHit
from dslog_dagster.core.reuse.registry import RegistryCapture as RegistryCapture
from dslog_dagster.core.reuse.registry import ViewRegistry as ViewRegistry
from dslog_dagster.core.reuse.serving import LazyRelations as LazyRelations
from dslog_dagster.core.reuse.serving import Need as Need
from dslog_dagster.core.reuse.serving import UnservedRelations as UnservedRelations
from dslog_dagster.core.reuse.verification import verify_sample as verify_sample
from dslog_dagster.core.reuse.views import GenTemplate as GenTemplate

__all__ = [
    "DeclaredHit",
    "GenTemplate",
    "LazyRelations",
    "Need",
    "RegistryCapture",
    "ReusePolicy",
    "UnservedRelations",
    "Unsignable",
    "ViewInfo",
    "ViewRegistry",
    "base_sig",
    "code_identity",
    "dim_sig",
    "gen_sig",
    "verify_sample",
]
