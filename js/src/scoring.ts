/**
 * Scores and the warm-up threshold, as pure functions (sdk/uvsdk/scoring.py).
 *
 * Codeword mode (FedUV, eq. 5): the score of an output `z` against the user's ±1 codeword `v` is
 * `e = v · rescale(z, √n) / n`. Prototype mode: the reference is the normalised mean of the
 * enrollment vectors and the score is the cosine. All arithmetic is float64; sums over a vector
 * use numpy's pairwise summation so results match the Python SDK to the last bit where numpy's
 * reductions decide them (dot products go through BLAS in numpy and can differ in the last ulp).
 */

const EPSILON = 1e-12;

/** A vector: any array of numbers (float32 or float64). */
export type Vector = ArrayLike<number>;

/**
 * numpy's pairwise summation of `f(a[i])` over `a[start:start+n]` (numpy/core/src/umath/loops:
 * pairwise_sum): below 8 terms in order, up to 128 with eight accumulators, else split in halves.
 */
export function pairwiseSum(a: Vector, start = 0, n = a.length - start, f: (x: number) => number = (x) => x): number {
  if (n < 8) {
    if (n === 0) return 0;
    let res = f(a[start]!);
    for (let i = 1; i < n; i++) res += f(a[start + i]!);
    return res;
  }
  if (n <= 128) {
    const r = [0, 0, 0, 0, 0, 0, 0, 0];
    for (let j = 0; j < 8; j++) r[j] = f(a[start + j]!);
    let i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (let j = 0; j < 8; j++) r[j]! += f(a[start + i + j]!);
    }
    // numpy: ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    let res = r[0]! + r[1]! + (r[2]! + r[3]!) + (r[4]! + r[5]! + (r[6]! + r[7]!));
    for (; i < n; i++) res += f(a[start + i]!);
    return res;
  }
  let n2 = Math.floor(n / 2);
  n2 -= n2 % 8;
  return pairwiseSum(a, start, n2, f) + pairwiseSum(a, start + n2, n - n2, f);
}

/** Mean of the squares in float64 (`np.mean(np.square(x, dtype=np.float64))`). */
export function meanSquare(a: Vector, start = 0, n = a.length - start): number {
  return pairwiseSum(a, start, n, (x) => x * x) / n;
}

/** L2 norm in float64 (`np.linalg.norm`). */
export function norm(v: Vector): number {
  return Math.sqrt(pairwiseSum(v, 0, v.length, (x) => x * x));
}

/** `rescale`: the vector scaled to the given L2 norm (a zero vector stays zero). */
export function rescale(v: Vector, length: number): Float64Array {
  const n = Math.max(norm(v), EPSILON);
  const out = new Float64Array(v.length);
  for (let i = 0; i < v.length; i++) out[i] = (v[i]! / n) * length;
  return out;
}

/** Dot product in float64. */
export function dot(a: Vector, b: Vector): number {
  if (a.length !== b.length) throw new RangeError(`vectors of length ${a.length} and ${b.length}`);
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
}

/** `codeword_scores` for one output: `e = v · rescale(z, √n) / n` (`v` the ±1 codeword). */
export function codewordScore(codeword: Vector, output: Vector): number {
  const n = codeword.length;
  return dot(rescale(output, Math.sqrt(n)), codeword) / n;
}

/** `cosine_scores` for one vector: cosine of `vector` with `reference`. */
export function cosine(reference: Vector, vector: Vector): number {
  return dot(rescale(vector, 1), rescale(reference, 1));
}

/** Column sums of rows, added row after row (numpy's reduction over axis 0). */
function columnSums(rows: Vector[]): Float64Array {
  const dim = rows[0]!.length;
  const out = new Float64Array(dim);
  for (const row of rows) {
    if (row.length !== dim) throw new RangeError("rows of different lengths");
    for (let j = 0; j < dim; j++) out[j]! += row[j]!;
  }
  return out;
}

/** `prototype`: the normalised mean of the L2-normalised rows. */
export function prototype(rows: Vector[]): Float64Array {
  if (rows.length === 0) throw new RangeError("the prototype needs at least one vector");
  const sums = columnSums(rows.map((r) => rescale(r, 1)));
  for (let j = 0; j < sums.length; j++) sums[j] = sums[j]! / rows.length;
  return rescale(sums, 1);
}

/**
 * The leave-one-out pairs: each row rescaled to unit length (`units[i]`), and the unit-length
 * normalised sum of all the other rows (`others[i]`, the prototype without row `i`).
 */
export function leaveOneOutPairs(rows: Vector[]): { units: Float64Array[]; others: Float64Array[] } {
  if (rows.length < 2) throw new RangeError("leave-one-out needs at least two vectors");
  const units = rows.map((r) => rescale(r, 1));
  const total = columnSums(units);
  const others = units.map((unit) => {
    const rest = new Float64Array(unit.length);
    for (let j = 0; j < unit.length; j++) rest[j] = total[j]! - unit[j]!;
    return rescale(rest, 1);
  });
  return { units, others };
}

/** `leave_one_out_scores`: each row's cosine with the normalised mean of all the others. */
export function leaveOneOutScores(rows: Vector[]): Float64Array {
  const { units, others } = leaveOneOutPairs(rows);
  return Float64Array.from(units, (unit, i) => pairwiseSumProduct(others[i]!, unit));
}

/** `np.sum(a * b)`: pairwise sum of the elementwise product. */
function pairwiseSumProduct(a: Float64Array, b: Float64Array): number {
  const products = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) products[i] = a[i]! * b[i]!;
  return pairwiseSum(products);
}

/**
 * `warmup_threshold`: the ⌊n(1 − q)⌋-th smallest of the n scores (1-based, at least the first);
 * a 1e-9 tolerance keeps `n(1 − q)` from flooring one too low through rounding.
 */
export function warmupThreshold(scores: Vector, targetTpr: number): number {
  const sorted = Float64Array.from(scores).sort();
  if (sorted.length === 0) throw new RangeError("the warm-up needs at least one score");
  if (!(targetTpr > 0 && targetTpr <= 1)) throw new RangeError(`target TPR must be in (0, 1], not ${targetTpr}`);
  const rank = Math.max(1, Math.floor(sorted.length * (1 - targetTpr) + 1e-9));
  return sorted[rank - 1]!;
}

/**
 * `x` rounded to the nearest integer, ties to even: how sample counts are rounded (spec §5.4: a
 * window of 27562.5 samples is 27562). `x - floor(x)` is exact for doubles, so the tie test is.
 */
export function roundHalfEven(x: number): number {
  if (!Number.isFinite(x)) throw new RangeError(`cannot round ${x}`);
  const whole = Math.floor(x);
  const fraction = x - whole;
  if (fraction !== 0.5) return fraction < 0.5 ? whole : whole + 1;
  return whole % 2 === 0 ? whole : whole + 1;
}
