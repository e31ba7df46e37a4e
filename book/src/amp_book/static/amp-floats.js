/* Exact floating-point casts for the book's playgrounds, as torch 2.13 does them.
 *
 * The page hands over each format's parameters as JSON, computed by
 * amp_book.playground_text.format_parameters from amp_lesson.formats and torch's
 * own casts; nothing about a format is typed in here. A JavaScript number is
 * an IEEE double, so every step below is exact: Math.fround rounds a double
 * to float32 exactly as C++'s cast does (to nearest, ties to even), powers of
 * two are built from their bits, and the narrower formats are rounded from
 * the float32 value with an explicit round-half-to-even.
 *
 * What a typed number is cast from: the text is read as Python's float(text)
 * reads it (a double), and stored in each format as torch casts a float64
 * tensor: to float32 first, then to the narrower format (so a double can be
 * rounded twice, exactly as torch rounds it). amp_lesson.formats.store does
 * the same in Python, and the browser tests compare the two.
 *
 * Exposes window.ampFloats. No dependency, nothing fetched.
 */
(function () {
  "use strict";

  var view = new DataView(new ArrayBuffer(8));
  var FP32_MANTISSA_BITS = 23;
  var FP32_QUIET = 0x400000; // the quiet bit of a float32 NaN's mantissa

  /** 2**k exactly, for an integer k in [-1074, 1023]. */
  function pow2(k) {
    if (k < -1022) return pow2(k + 64) * pow2(-64); // a subnormal double: exact
    view.setUint32(0, (k + 1023) * 0x100000);
    view.setUint32(4, 0);
    return view.getFloat64(0);
  }

  /** floor(log2(a)) exactly, for a finite double a > 0 (read from its exponent bits). */
  function floorLog2(a) {
    view.setFloat64(0, a);
    var biased = (view.getUint32(0) >>> 20) & 0x7ff;
    if (biased === 0) return floorLog2(a * pow2(64)) - 64; // subnormal double
    return biased - 1023;
  }

  function f32Bits(x) {
    view.setFloat32(0, x);
    return view.getUint32(0);
  }

  function f32FromBits(bits) {
    view.setUint32(0, bits >>> 0);
    return view.getFloat32(0);
  }

  function isNegative(x) {
    return x < 0 || Object.is(x, -0);
  }

  /** Round y >= 0 to an integer, ties to even (y - floor(y) is exact). */
  function roundHalfEven(y) {
    var low = Math.floor(y);
    var rest = y - low;
    if (rest > 0.5) return low + 1;
    if (rest < 0.5) return low;
    return low % 2 === 0 ? low : low + 1;
  }

  /* ------------------------------------------------------------ a source value
   * { value: double, nan: bool, sign: 0|1, payload: float32-level NaN mantissa }.
   * A NaN keeps its sign and its payload as torch's float64 -> float32 cast
   * leaves them: the top 23 bits of the double's mantissa, quiet bit set. */

  function numberSource(value) {
    if (value !== value) return { value: NaN, nan: true, sign: 0, payload: FP32_QUIET };
    return { value: value, nan: false, sign: isNegative(value) ? 1 : 0, payload: 0 };
  }

  function nanSource(sign, payload) {
    return { value: NaN, nan: true, sign: sign, payload: (payload | FP32_QUIET) >>> 0 };
  }

  /* --------------------------------------------------------------- formats */

  function fieldsOf(pattern, spec) {
    var m = spec.mantissa_bits;
    var e = spec.exponent_bits;
    var signPlace = pow2(spec.bits - 1);
    var sign = pattern >= signPlace ? 1 : 0;
    var rest = pattern - sign * signPlace;
    var exponent = Math.floor(rest / pow2(m));
    return { sign: sign, exponent: exponent, mantissa: rest - exponent * pow2(m), ones: pow2(e) - 1 };
  }

  /** The pattern a format stores for a NaN of this sign and float32-level payload. */
  function nanPattern(spec, sign, payload) {
    var rule = spec.nan;
    var canonical = fieldsOf(rule.pattern, spec);
    var body = rule.keeps_payload
      ? canonical.ones * pow2(spec.mantissa_bits) +
        Math.floor(payload / pow2(FP32_MANTISSA_BITS - spec.mantissa_bits))
      : rule.pattern - canonical.sign * pow2(spec.bits - 1);
    var signBit = rule.keeps_sign ? sign : canonical.sign;
    return signBit * pow2(spec.bits - 1) + body;
  }

  /** The pattern of a non-negative magnitude r that the format holds (or inf). */
  function encode(r, spec) {
    var m = spec.mantissa_bits;
    var emin = 1 - spec.bias;
    if (r === Infinity) return (pow2(spec.exponent_bits) - 1) * pow2(m);
    if (r === 0) return 0;
    var k = floorLog2(r);
    if (k < emin) return r / pow2(emin - m); // subnormal: exponent field 0
    return (k + spec.bias) * pow2(m) + (r / pow2(k - m) - pow2(m));
  }

  /**
   * What `spec` stores for a float32 value f (a double holding a float32):
   * round to the format's mantissa, ties to even, with the exponent clamped
   * at the subnormal end; a result past max overflows to inf, or to max for
   * a saturating cast (E4M3 in torch 2.13 on the CPU: even inf -> 448).
   * Returns { value, pattern }.
   */
  function castFloat32(f, spec) {
    var negative = isNegative(f);
    var magnitude = Math.abs(f);
    var r = magnitude;
    if (magnitude !== 0 && magnitude !== Infinity) {
      var quantum = pow2(Math.max(floorLog2(magnitude), 1 - spec.bias) - spec.mantissa_bits);
      r = roundHalfEven(magnitude / quantum) * quantum;
    }
    if (r > spec.max) {
      if (spec.saturates) r = spec.max;
      else if (!spec.has_inf) return { value: NaN, pattern: nanPattern(spec, negative ? 1 : 0, FP32_QUIET) };
      else r = Infinity;
    }
    return {
      value: negative ? -r : r,
      pattern: (negative ? pow2(spec.bits - 1) : 0) + encode(r, spec),
    };
  }

  /** Whether a magnitude rounds past spec.max with an unbounded exponent (formats._beyond_range). */
  function beyondRange(spec, magnitude) {
    var gap = pow2(floorLog2(spec.max) - spec.mantissa_bits);
    var midpoint = spec.max + gap / 2;
    var maxIsOdd = Math.floor(spec.max / gap) % 2 === 1;
    return magnitude > midpoint || (magnitude === midpoint && maxIsOdd);
  }

  function bitString(pattern, width) {
    var text = pattern.toString(2);
    while (text.length < width) text = "0" + text;
    return text;
  }

  /**
   * What `spec` stores for a source, with its bits and what happened: the
   * fields of amp_lesson.formats.Stored (value, stored, sign, exponent,
   * mantissa, kind, event, rel_error), computed the same way. A NaN in a
   * format with none (FP4 E2M1), which amp_lesson.formats.store refuses, is
   * not stored: pattern null, kind "none", event "no_nan".
   */
  function store(source, spec) {
    if (source.nan && !spec.has_nan) {
      return {
        value: source.value,
        format: spec.name,
        stored: NaN,
        pattern: null,
        sign: "",
        exponent: "",
        mantissa: "",
        kind: "none",
        event: "no_nan",
        rel_error: NaN,
      };
    }
    var cast;
    if (source.nan) {
      cast = { value: NaN, pattern: nanPattern(spec, source.sign, source.payload) };
    } else {
      cast = castFloat32(Math.fround(source.value), spec);
    }
    var stored = cast.value;
    var original = source.value;
    // Beyond range is judged on what the narrow cast rounds: the float32 (as in Python).
    var castFrom = spec.bits < 32 || spec.dtype === null ? Math.fround(original) : original;
    var bits = bitString(cast.pattern, spec.bits);

    var kind;
    if (stored !== stored) kind = "nan";
    else if (!isFinite(stored)) kind = "inf";
    else if (stored === 0) kind = "zero";
    else if (Math.abs(stored) < spec.smallest_normal) kind = "subnormal";
    else kind = "normal";

    var event;
    if (stored === original || (stored !== stored && original !== original)) event = "exact";
    else if (!isFinite(stored)) event = "overflow";
    else if (stored === 0) event = "underflow";
    else if (!isFinite(original) || beyondRange(spec, Math.abs(castFrom))) event = "saturated";
    else event = "rounded";

    return {
      value: original,
      format: spec.name,
      stored: stored,
      pattern: cast.pattern,
      sign: bits.slice(0, 1),
      exponent: bits.slice(1, 1 + spec.exponent_bits),
      mantissa: bits.slice(1 + spec.exponent_bits),
      kind: kind,
      event: event,
      rel_error: event === "exact" ? 0 : Math.abs(stored - original) / Math.abs(original),
    };
  }

  /** The source a bit pattern of `spec` stands for (torch's .item() of that pattern). */
  function patternSource(pattern, spec) {
    if (spec.fp32_top_bits) {
      // TF32: the FP32 pattern whose low mantissa bits are zero.
      return patternSource(pattern * pow2(FP32_MANTISSA_BITS - spec.mantissa_bits), FP32);
    }
    var f = fieldsOf(pattern, spec);
    var signPlace = pow2(spec.bits - 1);
    // With an infinity, every all-ones exponent but inf's is a NaN; without one
    // (E4M3), only the NaN pattern itself is, and the rest are numbers; E2M1 has none.
    var isNan = !spec.has_nan
      ? false
      : spec.has_inf
        ? f.exponent === f.ones && f.mantissa !== 0
        : pattern % signPlace === spec.nan.pattern % signPlace;
    if (isNan) {
      return nanSource(f.sign, f.mantissa * pow2(FP32_MANTISSA_BITS - spec.mantissa_bits));
    }
    var magnitude;
    if (spec.has_inf && f.exponent === f.ones) magnitude = Infinity;
    else if (f.exponent === 0) magnitude = f.mantissa * pow2(1 - spec.bias - spec.mantissa_bits);
    else magnitude = (pow2(spec.mantissa_bits) + f.mantissa) * pow2(f.exponent - spec.bias - spec.mantissa_bits);
    return numberSource(f.sign ? -magnitude : magnitude);
  }

  // FP32's layout, for TF32 patterns; the page's JSON fills in the rest.
  var FP32 = {
    dtype: "torch.float32",
    bits: 32,
    exponent_bits: 8,
    mantissa_bits: 23,
    bias: 127,
    has_inf: true,
    has_nan: true,
  };

  /* ---------------------------------------------------------------- reading */

  // One way to match each text: [0-9]+\.?[0-9]* could split a run of digits anywhere, and a
  // failed match tried every split (quadratic in the length).
  var DECIMAL = /^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/;
  var SPECIAL = /^([+-]?)(inf|infinity|nan)$/i;
  var PATTERN = /^(?:([A-Za-z0-9_]+)\s*:\s*)?0[xX]([\s\S]*)$/;
  var HEX_DIGITS = /^[0-9A-Fa-f]+$/;
  var MAX_NUMBER_LENGTH = 2000; // amp_book.playground_text.MAX_NUMBER_LENGTH
  var HOW_TO_TYPE =
    "type a decimal such as 0.1 or -2.5e-8, inf, nan, or a bit pattern such as " +
    "0x3f800000 (FP32) or fp16:0x3c00";

  function InputError(message) {
    this.message = message;
  }

  /**
   * The source a text typed into the explorer stands for; the same language
   * and messages as amp_book.playground_text.read_number. `formats` maps each
   * format name to its parameters; `prefixes` maps a pattern prefix to a name.
   * Throws an InputError (never anything else) for text that is not a number.
   */
  function readNumber(text, formats, prefixes) {
    var stripped = String(text).trim();
    if (!stripped) throw new InputError("Type a number: " + HOW_TO_TYPE + ".");
    var length = Array.from(stripped).length; // code points, as Python's len counts
    if (length > MAX_NUMBER_LENGTH) {
      throw new InputError(
        "text must be at most " + MAX_NUMBER_LENGTH + " characters long, got " + length + ": " +
          HOW_TO_TYPE + "."
      );
    }
    if (DECIMAL.test(stripped)) return numberSource(Number(stripped));
    var special = SPECIAL.exec(stripped);
    if (special) {
      var sign = special[1] === "-" ? 1 : 0;
      if (special[2].toLowerCase() === "nan") return nanSource(sign, FP32_QUIET);
      return numberSource(sign ? -Infinity : Infinity);
    }
    var match = PATTERN.exec(stripped);
    if (!match) throw new InputError("\u201c" + stripped + "\u201d is not a number: " + HOW_TO_TYPE + ".");
    var name = "fp32";
    if (match[1] !== undefined) {
      var prefix = match[1].toLowerCase();
      if (!Object.prototype.hasOwnProperty.call(prefixes, prefix)) {
        var names = Object.keys(prefixes).filter(function (p) {
          return p.indexOf("fp8_") !== 0 && p.indexOf("fp4_") !== 0;
        });
        throw new InputError(
          "\u201c" + match[1] + "\u201d is not a format: a bit pattern may start with one of " +
            names.join(", ") + ", as in fp16:0x3c00."
        );
      }
      name = prefixes[prefix];
    }
    var digits = match[2];
    if (!HEX_DIGITS.test(digits)) {
      throw new InputError(
        "\u201c" + stripped + "\u201d is not a bit pattern: after 0x come hex digits, 0-9 and a-f."
      );
    }
    var spec = formats[name];
    var significant = digits.replace(/^0+/, "");
    var pattern = significant ? parseInt(significant, 16) : 0;
    if (significant.length > Math.ceil(spec.bits / 4) || pattern >= pow2(spec.bits)) {
      throw new InputError(
        stripped + " does not fit in " + spec.label + "'s " + spec.bits +
          " bits: the largest pattern is 0x" + (pow2(spec.bits) - 1).toString(16) + "."
      );
    }
    return patternSource(pattern, spec);
  }

  /* ---------------------------------------------------------------- writing */

  /** Python's repr of a float: the shortest digits that read back exactly. */
  function pyRepr(x) {
    if (x !== x) return "nan";
    if (x === Infinity) return "inf";
    if (x === -Infinity) return "-inf";
    if (x === 0) return isNegative(x) ? "-0.0" : "0.0";
    var parts = /^(-?)(\d)(?:\.(\d+))?e([+-]\d+)$/.exec(x.toExponential());
    var sign = parts[1];
    var digits = parts[2] + (parts[3] || "");
    var exp = parseInt(parts[4], 10);
    if (exp < -4 || exp >= 16) {
      var mantissa = digits.length > 1 ? digits[0] + "." + digits.slice(1) : digits;
      return sign + mantissa + "e" + (exp < 0 ? "-" : "+") + (Math.abs(exp) < 10 ? "0" : "") + Math.abs(exp);
    }
    if (exp >= digits.length - 1) return sign + digits + "0".repeat(exp - digits.length + 1) + ".0";
    if (exp >= 0) return sign + digits.slice(0, exp + 1) + "." + digits.slice(exp + 1);
    return sign + "0." + "0".repeat(-exp - 1) + digits;
  }

  /** The exact decimal digits of a finite double x > 0, and the power of ten of the first. */
  function exactDigits(x) {
    view.setFloat64(0, x);
    var hi = view.getUint32(0);
    var lo = view.getUint32(4);
    var biased = (hi >>> 20) & 0x7ff;
    var mantissa = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
    if (biased) mantissa |= 1n << 52n;
    var exp2 = (biased || 1) - 1075; // x = mantissa * 2**exp2
    var digits;
    var exp10;
    if (exp2 >= 0) {
      digits = (mantissa << BigInt(exp2)).toString();
      exp10 = digits.length - 1;
    } else {
      digits = (mantissa * 5n ** BigInt(-exp2)).toString(); // x = digits * 10**exp2
      exp10 = digits.length - 1 + exp2;
    }
    return { digits: digits.replace(/0+$/, "") || "0", exp10: exp10 };
  }

  /** Python's format(x, "." + precision + "g"), exactly rounded (ties to even). */
  function formatG(x, precision) {
    if (x !== x) return "nan";
    if (x === Infinity) return "inf";
    if (x === -Infinity) return "-inf";
    if (x === 0) return isNegative(x) ? "-0" : "0";
    var sign = x < 0 ? "-" : "";
    var exact = exactDigits(Math.abs(x));
    var digits = exact.digits;
    var exp = exact.exp10;
    if (digits.length > precision) {
      var kept = BigInt(digits.slice(0, precision));
      var rest = digits.slice(precision);
      var up = rest[0] > "5" || (rest[0] === "5" && (/[1-9]/.test(rest.slice(1)) || kept % 2n === 1n));
      if (up) kept += 1n;
      digits = kept.toString();
      if (digits.length > precision) {
        exp += 1; // 999.. carried into a new digit
        digits = digits.slice(0, precision);
      }
    }
    digits = digits.replace(/0+$/, "") || "0";
    if (exp < -4 || exp >= precision) {
      var mantissa = digits.length > 1 ? digits[0] + "." + digits.slice(1) : digits;
      return sign + mantissa + "e" + (exp < 0 ? "-" : "+") + (Math.abs(exp) < 10 ? "0" : "") + Math.abs(exp);
    }
    if (exp >= digits.length - 1) return sign + digits + "0".repeat(exp - digits.length + 1);
    if (exp >= 0) return sign + digits.slice(0, exp + 1) + "." + digits.slice(exp + 1);
    return sign + "0." + "0".repeat(-exp - 1) + digits;
  }

  window.ampFloats = {
    InputError: InputError,
    beyondRange: beyondRange,
    f32Bits: f32Bits,
    f32FromBits: f32FromBits,
    floorLog2: floorLog2,
    formatG: formatG,
    numberSource: numberSource,
    patternSource: patternSource,
    pow2: pow2,
    pyRepr: pyRepr,
    readNumber: readNumber,
    store: store,
  };
})();
