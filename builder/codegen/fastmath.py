"""Vectorizable float32 math: ``exp``, ``erf`` and ``tanh`` as plain arithmetic on a ``float`` or a vector of
them, so that the loop vectorizer turns a loop calling them into SIMD code (LLVM lowers
``llvm.exp`` / ``erff`` to one libm call per element, which it cannot vectorize).

The ``emit`` lowerings of :data:`builder.ir.tir.INTRINSICS` live here too (:func:`erf`, :func:`tanh`,
:func:`rsqrt`, :func:`sigmoid`: any float type). Each function takes the expression emitter ``em``
(:class:`builder.codegen.llvm_emit.BufferExprEmitter`
or any object with an ``llvmlite`` builder ``b`` and ``fcall(name, args)`` for LLVM intrinsics) and
an ``ir.Value`` of type ``float`` or ``<N x float>`` (the intrinsic lowerings: any float type);
it returns a value of the same type.
"""
from __future__ import annotations


from llvmlite import ir

from ..ir.tir.intrinsics import INTRINSICS

__all__ = ["FAST_MATH", "EXP_COEFFS", "exp_f32", "erf_f32", "erf", "tanh_f32", "tanh", "rsqrt", "sigmoid", "ERF_SMALL",
           "ERF_SMALL_COEFFS", "ERF_LARGE_COEFFS", "TANH_SMALL", "TANH_SMALL_COEFFS"]

_FM = ("nsz", "contract")
#: The fast-math flags of the code generator's float arithmetic (no ``nnan`` / ``ninf``: ``-inf`` is a
#: legal value).
FAST_MATH = ("reassoc", "contract", "nsz")

#: ``|x|`` below which :func:`erf_f32` uses the odd series form ``x * P(x**2)``.
ERF_SMALL = 0.921875

#: ``P(t)``, ``t = x**2``, for ``|x| < ERF_SMALL``: ``erf(x) ~ x * P(x**2)``, lowest order first.
#: Our own weighted least-squares fit of ``erf(x) / x`` at 4,000 Chebyshev nodes in ``t`` (float64
#: reference ``math.erf``), rounded to float32; the leading coefficient is ``2 / sqrt(pi)``.
ERF_SMALL_COEFFS = (1.1283791065216064, -0.37612491846084595, 0.1128179281949997, -0.026765864342451096,
                    0.004992183297872543, -0.0005986210890114307)

#: ``Q(a)`` for ``ERF_SMALL <= a <= 4``: ``erfc(a) ~ exp(-a**2 + Q(a))``, lowest order first. Our own
#: least-squares fit of ``log(erfc(a)) + a**2`` (a smooth function, ``~ -log(a sqrt(pi))``) at 6,000
#: Chebyshev nodes in ``[0.921875, 4]``, rounded to float32. Beyond ``a = 4`` float32 ``erf`` is 1.
ERF_LARGE_COEFFS = (0.0003025367623195052, -1.1301639080047607, 0.36805832386016846, -0.10997401177883148,
                    0.026362359523773193, -0.0047394102439284325, 0.0005926000303588808,
                    -4.557097781798802e-05, 1.6130911717482377e-06)

#: ``|x|`` below which :func:`tanh_f32` uses the odd series form ``x + x**3 * P(x**2)``.
TANH_SMALL = 0.625

#: ``P(z)``, ``z = x**2``, for ``|x| < TANH_SMALL``: ``tanh(x) ~ x + x * z * P(z)``, lowest order first.
#: Our own least-squares fit of ``(tanh(x) / x - 1) / z`` weighted by ``z`` (the relative error of
#: ``tanh``) at 6,000 Chebyshev nodes in ``[2**-12, 0.625]`` (float64 reference ``numpy.tanh``),
#: rounded to float32: 0.77 ulp at most in float32 evaluation. The leading coefficient is ``-1/3``
#: (the Taylor series ``x - x**3 / 3 + 2 x**5 / 15 ...``).
TANH_SMALL_COEFFS = (-0.3333328664302826, 0.13331560790538788, -0.05374845489859581, 0.020664764568209648,
                     -0.005731234792619944)

#: ``P(r)`` for ``exp(r) ~ 1 + r (1 + r P(r))`` on ``|r| <= ln2 / 2``, lowest order first: our own
#: least-squares fit of ``(exp(r) - 1 - r) / r**2`` weighted by ``r**2 / exp(r)`` (the relative error
#: of ``exp``) at 8,000 Chebyshev nodes (float64 reference), rounded to float32: 0.73 ulp at most in
#: float32 Horner evaluation (6 FMAs).
EXP_COEFFS = (0.49999988079071045, 0.166665181517601, 0.04166953265666962, 0.008368915878236294,
              0.0013751407386735082)


def _splat(t: ir.Type, v: float) -> ir.Constant:
    return ir.Constant(t, [v] * t.count) if isinstance(t, ir.VectorType) else ir.Constant(t, v)


def _horner(em, coeffs, v: ir.Value) -> ir.Value:
    t = v.type
    p = _splat(t, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        p = em.fcall("fmuladd", [p, v, _splat(t, c)])
    return p


def _below(b, x: ir.Value, hi: float) -> ir.Value:
    """``min(x, hi)`` that keeps a NaN ``x`` (one ``vminps``: ``x > hi ? hi : x``; ``minnum`` would
    drop the NaN and cost a compare and a blend more)."""
    return b.select(b.fcmp_ordered(">", x, _splat(x.type, hi)), _splat(x.type, hi), x)


def exp_f32(em, x: ir.Value, bounded: bool = False, nonpositive: bool = False) -> ir.Value:
    """``exp(x)`` within 2 ulp of the correctly rounded value for normal results: Cody-Waite range
    reduction ``x = n ln2 + r`` (``|r| <= ln2 / 2``; the split ``ln2`` of Cephes ``expf.c``, S.
    Moshier), a degree-6 polynomial for ``exp(r)`` in 6 FMAs (:data:`EXP_COEFFS`; Cephes' form took
    8 operations: an elementwise exp over 256 K floats 8% faster), and ``2**n`` built in the exponent
    bits. Results below 2**-126 flush to 0; ``x > 88.72`` gives ``inf`` (the clamp at 89 overflows the last multiply); NaN
    propagates (through the arithmetic: the clamps keep it). ``bounded``: the caller guarantees
    ``-87.3 <= x <= 88.7`` or NaN (``erf``'s exponent), so no clamp or flush is emitted.
    ``nonpositive``: the caller guarantees ``x <= 0``, ``-inf`` or NaN (a softmax's ``s - max``), so
    no upper clamp and ``2**n`` (``n`` in [-126, 0]) in one multiply, where ``n = 128`` needs two."""
    b = em.b
    t = x.type
    vec = isinstance(t, ir.VectorType)
    it = ir.VectorType(ir.IntType(32), t.count) if vec else ir.IntType(32)

    def c(v: float) -> ir.Value:
        return _splat(t, v)

    def ci(v: int) -> ir.Value:
        return ir.Constant(it, [v] * t.count) if vec else ir.Constant(it, v)

    if bounded:
        xc = x
    elif nonpositive:
        xc = b.select(b.fcmp_ordered("<", x, c(-87.33654)), c(-87.33654), x)
    else:
        xc = _below(b, b.select(b.fcmp_ordered("<", x, c(-87.33654)), c(-87.33654), x), 89.0)
    n = em.fcall("roundeven", [b.fmul(xc, c(1.44269504088896341), flags=_FM)])
    r = b.fsub(xc, b.fmul(n, c(0.693359375), flags=_FM), flags=_FM)
    r = b.fsub(r, b.fmul(n, c(-2.12194440e-4), flags=_FM), flags=_FM)
    y = em.fcall("fmuladd", [em.fcall("fmuladd", [_horner(em, EXP_COEFFS, r), r, c(1.0)]), r, c(1.0)])
    # n is in [-126, 129]: scale by 2**(n/2) twice so that n = 128 does not overflow the exponent
    # field before the final multiply. n is integral: adding 1.5 * 2**23 puts it in the low mantissa
    # bits exactly (no fptosi, whose NaN result would be poison: a NaN x stays NaN through y)
    ni = b.sub(b.bitcast(b.fadd(n, c(12582912.0)), it), ci(0x4B400000))
    if nonpositive:
        y = b.fmul(y, b.bitcast(b.shl(b.add(ni, ci(127)), ci(23)), t), flags=_FM)
    else:
        h = b.ashr(ni, ci(1))
        s1 = b.bitcast(b.shl(b.add(h, ci(127)), ci(23)), t)
        s2 = b.bitcast(b.shl(b.add(b.sub(ni, h), ci(127)), ci(23)), t)
        y = b.fmul(b.fmul(y, s1, flags=_FM), s2, flags=_FM)
    if bounded:
        return y
    return b.select(b.fcmp_ordered("<", x, c(-87.33654)), c(0.0), y)


def erf_f32(em, x: ir.Value) -> ir.Value:
    """The Gauss error function ``erf(x)`` within 3 ulp of ``math.erf`` for every float32 ``x``
    (measured: see ``tests/codegen/test_fastmath.py``), branch-free:

    - ``|x| < 0.921875``: ``x * P(x**2)`` (:data:`ERF_SMALL_COEFFS`; exact odd symmetry, no
      cancellation near 0, denormals kept);
    - otherwise ``1 - exp(-a**2 + Q(a))`` with ``a = min(|x|, 4)`` (:data:`ERF_LARGE_COEFFS`, after
      the asymptotic form ``erfc(a) ~ exp(-a**2) / (a sqrt(pi))`` of Abramowitz & Stegun 7.1.23),
      its sign copied from ``x``; ``exp`` is :func:`exp_f32`.

    ``erf(+-inf) = +-1``; NaN propagates."""
    b = em.b
    t = x.type
    a = em.fcall("fabs", [x])
    # the polynomials' arguments at least 2**-40: below it their products (a**2, c * a**2) are
    # denormal, which an Intel core computes in microcode (GELU of inputs near 1e-20: 15.8 ns per
    # element against 0.75); there P(a**2) = P(0) in float32 and the large branch is not taken
    lo = _splat(t, 2.0 ** -40)
    ap = b.select(b.fcmp_ordered("<", a, lo), lo, a)   # a NaN stays NaN
    small = b.fmul(a, _horner(em, ERF_SMALL_COEFFS, b.fmul(ap, ap, flags=_FM)), flags=_FM)
    ac = _below(b, ap, 4.0)                 # a NaN stays NaN through every step below
    arg = em.fcall("fmuladd", [b.fneg(ac), ac, _horner(em, ERF_LARGE_COEFFS, ac)])   # in [-16, 0]
    large = b.fsub(_splat(t, 1.0), exp_f32(em, arg, bounded=True), flags=_FM)
    return em.fcall("copysign", [b.select(b.fcmp_ordered("<", a, _splat(t, ERF_SMALL)), small, large), x])


def _in_float32(em, x: ir.Value, name: str, f32) -> ir.Value:
    """The intrinsic ``name`` of ``x``: ``f32(em, x)`` for float32 and float16 (computed in float32),
    the C library's function (``INTRINSICS[name].libm``) for float64."""
    b = em.b
    if x.type == ir.DoubleType():
        return em.libm_call(INTRINSICS[name].libm, x)
    half = x.type == ir.HalfType()
    y = f32(em, b.fpext(x, ir.FloatType()) if half else x)
    return b.fptrunc(y, ir.HalfType()) if half else y


def erf(em, x: ir.Value) -> ir.Value:
    """The ``erf`` intrinsic: :func:`erf_f32` for float32 and float16 (computed in float32), the C
    library's ``erf`` for float64."""
    return _in_float32(em, x, "erf", erf_f32)


def tanh_f32(em, x: ir.Value) -> ir.Value:
    """The hyperbolic tangent ``tanh(x)`` within 2 ulp of ``numpy.tanh`` for every float32 ``x``
    (measured: 1.26 ulp at most, see ``tests/codegen/test_fastmath.py``), branch-free, the split of Cephes' ``tanhf``
    (S. Moshier) with our own coefficients:

    - ``|x| < 0.625``: ``x + x * z * P(z)``, ``z = x**2`` (:data:`TANH_SMALL_COEFFS`; exact odd
      symmetry, no cancellation near 0); ``|x| < 2**-12`` returns ``x`` (``tanh(x) = x`` in float32
      there; the polynomial's argument is clamped so that no product is denormal);
    - otherwise ``1 - 2 / (exp(2 a) + 1)``, ``a = min(|x|, 10)`` (float32 ``tanh`` is 1 from 9.011
      on), its sign copied from ``x``; ``exp`` is :func:`exp_f32` on ``[1.25, 20]``.

    ``tanh(+-inf) = +-1``, ``tanh(-0) = -0``; NaN propagates."""
    b = em.b
    t = x.type
    a = em.fcall("fabs", [x])
    tiny = _splat(t, 2.0 ** -12)
    is_tiny = b.fcmp_ordered("<", a, tiny)
    ap = b.select(is_tiny, tiny, a)   # a NaN stays NaN
    z = b.fmul(ap, ap, flags=_FM)
    small = em.fcall("fmuladd", [b.fmul(ap, z, flags=_FM), _horner(em, TANH_SMALL_COEFFS, z), ap])
    ac = _below(b, ap, 10.0)
    e = exp_f32(em, b.fadd(ac, ac, flags=_FM), bounded=True)
    large = b.fsub(_splat(t, 1.0), b.fdiv(_splat(t, 2.0), b.fadd(e, _splat(t, 1.0), flags=_FM), flags=_FM),
                   flags=_FM)
    mag = b.select(b.fcmp_ordered("<", ap, _splat(t, TANH_SMALL)), small, large)
    return b.select(is_tiny, x, em.fcall("copysign", [mag, x]))


def tanh(em, x: ir.Value) -> ir.Value:
    """The ``tanh`` intrinsic: :func:`tanh_f32` for float32 and float16 (computed in float32), the C
    library's ``tanh`` for float64."""
    return _in_float32(em, x, "tanh", tanh_f32)


def rsqrt(em, x: ir.Value) -> ir.Value:
    """The ``rsqrt`` intrinsic: ``1 / sqrt(x)``. LLVM's correctly rounded ``llvm.sqrt`` then a division
    under :data:`FAST_MATH` (no ``arcp`` / ``afn``: no reciprocal-square-root estimate): two correctly
    rounded steps, a relative error below ``2**-23`` in float32; ``rsqrt(0)`` is ``inf``, of a negative
    number NaN."""
    return em.b.fdiv(_splat(x.type, 1.0), em.fcall("sqrt", [x]), flags=FAST_MATH)


def sigmoid(em, x: ir.Value) -> ir.Value:
    """The ``sigmoid`` intrinsic: ``1 / (1 + exp(-x))`` (``exp`` as :meth:`fcall` lowers it:
    :func:`exp_f32` for float32)."""
    b = em.b
    den = b.fadd(_splat(x.type, 1.0), em.fcall("exp", [b.fneg(x, flags=FAST_MATH)]), flags=FAST_MATH)
    return b.fdiv(_splat(x.type, 1.0), den, flags=FAST_MATH)
