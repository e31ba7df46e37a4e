/* The GradScaler playground: set GradScaler's arguments and a schedule of
 * overflows, and watch the scale.
 *
 * Each `.amp-sp` holds a static note that points at the page's executed
 * trace; this script hides it and builds the playground from native
 * controls: four labelled fields, a pattern field (x an overflow, . a clean
 * step), an "overflow every k steps" filler, a toolbar of step toggles (one
 * Tab stop; arrow keys move, Enter or Space toggles), a summary, a plot and
 * the trace as a table. Everything updates as the reader edits: the summary,
 * the plot and the table's first rows within the same frame, the rest of a
 * long table in chunks after it (so typing never waits on a thousand rows);
 * the root's data-drawn is "all" once every row is in. A screen reader hears
 * the summary from a live region once the reader pauses.
 *
 * The arithmetic is GradScaler's update kernel, as amp_lesson.scaler.
 * ScalerSimulator models it: the scale is a float32, each product is formed
 * in double precision and rounded to float32 (Math.fround), growth that would
 * overflow float32 is skipped, backoff can walk the scale down to exactly 0,
 * and inv_scale is float32(1 / double(scale)), which is inf for a scale of 0
 * or one of 2**-128 (about 2.9e-39) or less. The browser tests compare every step with
 * ScalerSimulator and with a real torch.amp.GradScaler("cpu").
 *
 * What the reader reads stays short however far the scale runs: the plot's y axis is
 * labelled at a few round powers of two (2^0, 2^-50, 2^-100, ...), the x axis at round
 * steps (1, 250, 500, ...), and the table writes a power of two beyond 2^16 or below 2^-4 as 2^k and any
 * other number to five significant digits. Each row keeps the exact values (Python's
 * repr) in its data attributes, which the tests read.
 */
(function () {
  "use strict";

  var floats = window.ampFloats;
  var SUMMARY_DELAY_MS = 400; // the live region waits for a pause in typing
  var STRIP_LIMIT = 200; // step toggles shown; longer schedules are edited as text
  var FIRST_ROWS = 60; // rows drawn with the plot; the rest follow in chunks
  var ROW_CHUNK = 200;
  var TICKS_MAX = 6; // labelled powers of two on the y axis, at most
  // Strides between labelled powers (y) and labelled steps (x): round numbers only.
  var NICE = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000];
  var PLAIN_POWERS = [-4, 16]; // 2^-4 = 0.0625 ... 2^16 = 65536 are written out in the table
  var SIGNIFICANT = 5; // digits of any other number in the table
  // The trace's columns: heading (a soft hyphen where a long word may break), and
  // the narrowest the column may be, in ch; a column is otherwise as wide as its
  // widest value, and the last one wraps its words.
  var COLUMNS = [
    ["step", 4],
    ["scale used", 5],
    ["inv_scale", 9],
    ["over\u00adflow", 5],
    ["skipped", 7],
    ["scale after", 5],
    ["growth tracker", 7],
    ["what happened", 10],
  ];
  var FP32_MAX = floats.f32FromBits(0x7f7fffff);
  // As in amp-floats.js: one way to match each text, so a long one fails in linear time.
  var DECIMAL = /^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/;
  var INTEGER = /^[+-]?[0-9]+$/;
  var LARGEST_INTERVAL = 9007199254740991; // 2**53 - 1, the largest exact integer here
  var SVG = "http://www.w3.org/2000/svg";

  function make(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) {
      if (attrs[name] !== null && attrs[name] !== undefined) node.setAttribute(name, attrs[name]);
    });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (name) {
      node.setAttribute(name, attrs[name]);
    });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  /* ------------------------------------------------------ reading the fields
   * The same language and messages as amp_book.playground_text.read_scaler_settings
   * and read_steps (which check through ScalerSimulator). */

  function quoted(text) {
    return "\u201c" + text + "\u201d";
  }

  function readFactor(name, text) {
    text = text.trim();
    if (!DECIMAL.test(text)) return { error: name + " must be a number such as 2 or 0.5, got " + quoted(text) };
    var value = Number(text);
    if (!isFinite(value)) return { error: name + " must be a finite number, got " + floats.pyRepr(value) };
    var shown = floats.pyRepr(value);
    if (name === "init_scale") {
      if (value <= 0) return { error: "init_scale must be a finite number > 0, got " + shown };
      // torch refuses a scale above float32's largest value, even one that would round down to it
      if (value > FP32_MAX || Math.fround(value) === 0) {
        return {
          error:
            "init_scale must be representable in float32 (GradScaler keeps the scale in a float32 " +
            "tensor): between about 1.4e-45 and " + floats.formatG(FP32_MAX, 7) + ", got " + shown,
        };
      }
    } else if (name === "growth_factor" && value <= 1) {
      return { error: "growth_factor must be a finite number > 1, got " + shown };
    } else if (name === "backoff_factor" && !(value > 0 && value < 1)) {
      return { error: "backoff_factor must be in the open interval (0, 1), got " + shown };
    }
    return { value: value };
  }

  /** A whole number >= 1 typed into a field; `name` is how messages call the field. */
  function readWhole(name, text) {
    text = text.trim();
    if (!INTEGER.test(text)) {
      return { error: name + " must be a whole number such as 2000, got " + quoted(text) };
    }
    var exact = BigInt(text);
    if (exact > BigInt(LARGEST_INTERVAL)) {
      return { error: name + " must be at most " + LARGEST_INTERVAL + ", got " + exact };
    }
    if (exact < 1n) return { error: name + " must be an integer >= 1, got " + exact };
    return { value: Number(exact) };
  }

  function readSteps(pattern, maxSteps) {
    var schedule = [];
    for (var i = 0; i < pattern.length; i += 1) {
      var char = pattern[i];
      if (/\s/.test(char)) continue;
      if (char !== "." && char !== "x" && char !== "X") {
        return {
          error:
            "steps: character " + (i + 1) + " is " + quoted(char) +
            "; use . for a clean step and x for an overflow.",
        };
      }
      schedule.push(char !== ".");
    }
    if (!schedule.length) {
      return { error: "steps: type at least one step, . for a clean step or x for an overflow." };
    }
    if (schedule.length > maxSteps) {
      return { error: "steps: at most " + maxSteps + " steps, got " + schedule.length + "." };
    }
    return { value: schedule };
  }

  function patternOf(schedule) {
    return schedule
      .map(function (overflow) {
        return overflow ? "x" : ".";
      })
      .join("");
  }

  /* ---------------------------------------------------------- the arithmetic */

  /** GradScaler over a schedule: one row per step, as amp_lesson.scaler.simulate gives them. */
  function simulate(schedule, settings) {
    var scale = Math.fround(settings.init_scale);
    var tracker = 0;
    return schedule.map(function (overflow, i) {
      var used = scale;
      var change;
      if (overflow) {
        scale = Math.fround(scale * settings.backoff_factor);
        tracker = 0;
        change = "backoff";
      } else if (tracker + 1 === settings.growth_interval) {
        var grown = Math.fround(scale * settings.growth_factor);
        change = isFinite(grown) ? "grow" : "capped";
        if (isFinite(grown)) scale = grown;
        tracker = 0;
      } else {
        tracker += 1;
        change = "count";
      }
      return {
        step: i + 1,
        scale_used: used,
        inv_scale: Math.fround(1 / used), // GradScaler: scale.double().reciprocal().float()
        found_inf: overflow,
        skipped: overflow,
        scale_after: scale,
        growth_tracker_after: tracker,
        change: change,
      };
    });
  }


  /* ------------------------------------------------------------- the widget */

  function Playground(root, serial) {
    var data = JSON.parse(root.querySelector("script.amp-sp-data").textContent);
    var self = this;
    this.root = root;
    this.uid = root.id || "amp-sp-" + serial;
    this.maxSteps = data.max_steps;
    // What update() did, in amp_lesson.playground.CHANGE_TEXT's words (the page's data).
    this.changeText = data.change_text;
    var live = make("div", { class: "amp-sp-live" });

    var form = live.appendChild(make("form", { class: "amp-sp-form", novalidate: "" }));
    form.addEventListener("submit", function (event) {
      event.preventDefault();
    });
    var settings = form.appendChild(make("fieldset", { class: "amp-sp-settings" }));
    settings.appendChild(make("legend", {}, "torch.amp.GradScaler(\"cpu\", ...)"));
    this.fields = {};
    [
      ["init_scale", "decimal"],
      ["growth_factor", "decimal"],
      ["backoff_factor", "decimal"],
      ["growth_interval", "numeric"],
    ].forEach(function (entry) {
      self.fields[entry[0]] = self.field(settings, entry[0], entry[0], entry[1], data[entry[0]]);
    });

    var steps = form.appendChild(make("fieldset", { class: "amp-sp-steps" }));
    steps.appendChild(make("legend", {}, "Steps"));
    var patternId = this.uid + "-steps";
    steps.appendChild(
      make("label", { for: patternId, class: "amp-sp-label" }, "Pattern: x an overflow, . a clean step")
    );
    this.pattern = steps.appendChild(
      make("textarea", {
        id: patternId,
        class: "amp-sp-pattern",
        rows: "2",
        spellcheck: "false",
        autocomplete: "off",
        "aria-describedby": patternId + "-error",
      })
    );
    this.pattern.value = data.steps;
    this.patternError = steps.appendChild(make("p", { id: patternId + "-error", class: "amp-sp-error" }));
    this.patternError.hidden = true;

    // The fields describe a new pattern to fill in, not the run shown: its length starts at
    // the shown run's, so that filling keeps the run as long as the one on the page.
    var filler = steps.appendChild(make("div", { class: "amp-sp-filler" }));
    filler.appendChild(make("span", { class: "amp-sp-filler-lead" }, "Or write a new pattern:"));
    this.every = this.field(filler, "every", "Overflow every", "numeric", "10", "steps");
    this.count = this.field(filler, "count", "Run length", "numeric", String(data.steps.length), "steps");
    var fill = filler.appendChild(make("button", { type: "button", class: "amp-sp-fill" }, "Fill the pattern"));
    fill.addEventListener("click", function () {
      self.fill();
    });

    this.strip = steps.appendChild(
      make("div", {
        class: "amp-sp-strip",
        role: "toolbar",
        "aria-label": "Steps: pressed means an overflow; arrow keys move, Enter or Space toggles",
      })
    );
    this.stripNote = steps.appendChild(make("p", { class: "amp-sp-note" }));
    this.strip.addEventListener("click", function (event) {
      var button = event.target.closest("button.amp-sp-toggle");
      if (button) self.toggle(Number(button.getAttribute("data-step")));
    });
    this.strip.addEventListener("keydown", function (event) {
      var button = event.target.closest("button.amp-sp-toggle");
      if (!button) return;
      var count = self.strip.children.length;
      var index = Number(button.getAttribute("data-step")) - 1;
      var next = { ArrowLeft: index - 1, ArrowRight: index + 1, Home: 0, End: count - 1 }[event.key];
      if (next === undefined) return;
      event.preventDefault();
      self.focusStep(Math.max(0, Math.min(count - 1, next)));
    });

    // Shown at once; announced (the hidden live region) once the reader pauses.
    this.summary = live.appendChild(make("p", { class: "amp-sp-summary", "aria-hidden": "true" }));
    this.liveRegion = live.appendChild(
      make("p", { class: "amp-vh", role: "status", "aria-live": "polite" })
    );
    this.output = live.appendChild(make("div", { class: "amp-sp-output" }));
    var figure = this.output.appendChild(make("figure", { class: "amp-sp-plot" }));
    this.figure = figure;
    this.plot = figure.appendChild(
      svg("svg", { viewBox: "0 0 640 250", role: "img", "aria-labelledby": this.uid + "-plot-caption" })
    );
    figure.appendChild(
      make(
        "figcaption",
        { id: this.uid + "-plot-caption" },
        "The scale each step used, on a log2 axis; a cross marks an overflow, whose step was skipped."
      )
    );
    var wrap = this.output.appendChild(
      make("div", { class: "amp-sp-table-wrap", tabindex: "0", role: "region", "aria-label": "Trace, step by step" })
    );
    var table = wrap.appendChild(make("table", { class: "amp-sp-table" }));
    this.table = table;
    table.appendChild(make("caption", {}, "The trace: what update() did after each step"));
    // A fixed layout, its widths set from the values: the table is laid out once, not
    // again for every row added, which for a thousand steps took longer than a frame.
    var cols = table.appendChild(make("colgroup"));
    this.cols = COLUMNS.map(function () {
      return cols.appendChild(make("col"));
    });
    var head = table.appendChild(make("thead")).appendChild(make("tr"));
    COLUMNS.forEach(function (column) {
      head.appendChild(make("th", { scope: "col" }, column[0]));
    });
    this.body = table.appendChild(make("tbody"));

    root.querySelector(".amp-sp-static").hidden = true;
    root.appendChild(live);
    root.classList.add("amp-sp-ready");
    var resizing = null;
    window.addEventListener("resize", function () {
      window.clearTimeout(resizing);
      resizing = window.setTimeout(function () {
        if (self.rows) self.drawPlot(self.rows);
      }, 150);
    });
    form.addEventListener("input", function (event) {
      if (event.target === self.every.input || event.target === self.count.input) return;
      self.update();
    });
    this.update();
  }

  /** A labelled text field with its own error line; returns {input, error}. */
  Playground.prototype.field = function (parent, name, label, mode, value, after) {
    var id = this.uid + "-" + name;
    var box = parent.appendChild(make("div", { class: "amp-sp-field" }));
    box.appendChild(make("label", { for: id, class: "amp-sp-label" }, label));
    var input = box.appendChild(
      make("input", {
        id: id,
        type: "text",
        inputmode: mode,
        autocomplete: "off",
        spellcheck: "false",
        class: "amp-sp-input amp-sp-" + name,
        "aria-describedby": id + "-error",
      })
    );
    input.value = value;
    if (after) box.appendChild(make("span", { class: "amp-sp-after" }, after));
    var error = box.appendChild(make("p", { id: id + "-error", class: "amp-sp-error" }));
    error.hidden = true;
    return { input: input, error: error };
  };

  function setError(input, error, message) {
    if (message) input.setAttribute("aria-invalid", "true");
    else input.removeAttribute("aria-invalid");
    error.textContent = message || "";
    error.hidden = !message;
  }

  Playground.prototype.read = function () {
    var self = this;
    var problems = [];
    var settings = {};
    Object.keys(this.fields).forEach(function (name) {
      var field = self.fields[name];
      var got =
        name === "growth_interval" ? readWhole(name, field.input.value) : readFactor(name, field.input.value);
      setError(field.input, field.error, got.error);
      if (got.error) problems.push(got.error);
      else settings[name] = got.value;
    });
    var steps = readSteps(this.pattern.value, this.maxSteps);
    setError(this.pattern, this.patternError, steps.error);
    if (steps.error) problems.push(steps.error);
    return { settings: settings, schedule: steps.value, problems: problems };
  };

  Playground.prototype.update = function () {
    var got = this.read();
    if (got.schedule) this.drawStrip(got.schedule);
    if (got.problems.length) {
      this.output.classList.add("amp-sp-stale");
      this.root.setAttribute("data-state", "invalid");
      this.announce(got.problems.join(" "));
      return;
    }
    this.output.classList.remove("amp-sp-stale");
    this.root.setAttribute("data-state", "ok");
    this.schedule = got.schedule;
    var rows = simulate(got.schedule, got.settings);
    this.rows = rows;
    this.drawTable(rows);
    this.drawPlot(rows);
    this.announce(this.describe(rows));
  };

  /** The exponent k of a power of two 2^k, or null for any other number. */
  function powerOfTwo(x) {
    if (!(x > 0) || !isFinite(x)) return null;
    var k = floats.floorLog2(x);
    return floats.pow2(k) === x ? k : null;
  }

  /**
   * A number as the table writes it, {text, html}: a power of two beyond 2^16 or below
   * 2^-4 as 2^k (a raised k; the caret is there for a screen reader and for copying),
   * any other number to SIGNIFICANT digits, 0 as 0 and inf as inf.
   */
  function compact(x) {
    if (x === 0) return { text: "0", html: "0" };
    if (!isFinite(x)) return { text: floats.pyRepr(x), html: floats.pyRepr(x) };
    var k = powerOfTwo(x);
    if (k !== null && (k < PLAIN_POWERS[0] || k > PLAIN_POWERS[1])) {
      var exponent = String(k).replace("-", "\u2212");
      return { text: "2^" + k, html: '2<span class="amp-vh">^</span><sup>' + exponent + "</sup>" };
    }
    var text = k !== null ? floats.formatG(x, 17) : floats.formatG(x, SIGNIFICANT);
    return { text: text, html: text };
  }

  /** One row of the trace: the cells as text (for the columns' widths) and as HTML (numbers
   * and fixed words only: nothing typed by the reader), and the exact values (Python's repr). */
  function cellsOf(r, changeText) {
    var used = compact(r.scale_used);
    var inv = compact(r.inv_scale);
    var after = compact(r.scale_after);
    return {
      text: [
        String(r.step), used.text, inv.text, r.found_inf ? "yes" : "no", r.skipped ? "yes" : "no",
        after.text, String(r.growth_tracker_after), changeText[r.change],
      ],
      html: [
        String(r.step), used.html, inv.html, r.found_inf ? "yes" : "no", r.skipped ? "yes" : "no",
        after.html, String(r.growth_tracker_after), changeText[r.change],
      ],
      exact: [floats.pyRepr(r.scale_used), floats.pyRepr(r.inv_scale), floats.pyRepr(r.scale_after)],
    };
  }

  function rowHtml(r, cells) {
    return (
      "<tr" + (r.skipped ? ' class="amp-sp-skipped"' : "") + ' data-step="' + r.step +
      '" data-scale-used="' + cells.exact[0] + '" data-inv-scale="' + cells.exact[1] + '" data-found-inf="' +
      r.found_inf + '" data-skipped="' + r.skipped + '" data-scale-after="' + cells.exact[2] +
      '" data-growth-tracker="' + r.growth_tracker_after + '" data-change="' + r.change + '"><td>' + cells.html.join("</td><td>") +
      "</td></tr>"
    );
  }

  Playground.prototype.describe = function (rows) {
    var skipped = rows.filter(function (r) {
      return r.skipped;
    }).length;
    var last = rows[rows.length - 1];
    var text =
      (rows.length === 1 ? "1 step" : rows.length + " steps") + ", " + skipped +
      " skipped. The scale went from " +
      floats.pyRepr(rows[0].scale_used) + " to " + floats.pyRepr(last.scale_after) +
      "; the growth tracker ends at " + last.growth_tracker_after + ".";
    var zero = rows.find(function (r) {
      return r.scale_after === 0;
    });
    var infinite = rows.find(function (r) {
      return r.inv_scale === Infinity;
    });
    var capped = rows.find(function (r) {
      return r.change === "capped";
    });
    if (infinite) {
      text += " From step " + infinite.step + " the scale is 2^-128 or less, so inv_scale = 1/scale " +
        "overflows float32 to inf: a clean step then unscales its gradients to inf or NaN.";
    }
    if (zero) {
      text += " After step " + zero.step + " the scale is 0, and it cannot grow back: 0 \u00d7 " +
        "growth_factor is 0.";
    }
    if (capped) {
      text += " At step " + capped.step + " growth would have overflowed float32, so the scale stayed put.";
    }
    return text;
  };

  /** The trace as a table: the first rows now, the rest in chunks after this frame. */
  Playground.prototype.drawTable = function (rows) {
    var self = this;
    var changeText = this.changeText;
    var cells = rows.map(function (r) {
      return cellsOf(r, changeText);
    });
    // Each column as wide as its widest value (digits are 1ch in tabular figures), the
    // last one wrapping its words; a table wider than its box scrolls, with a cue.
    var widths = COLUMNS.map(function (column, c) {
      var widest = column[1];
      if (c === COLUMNS.length - 1) return widest;
      for (var i = 0; i < cells.length; i += 1) widest = Math.max(widest, cells[i].text[c].length);
      return widest;
    });
    var total = 0;
    widths.forEach(function (w, c) {
      self.cols[c].style.width = "calc(" + w + "ch + 0.6em)";
      total += w;
    });
    this.table.style.width = "calc(" + total + "ch + " + 0.6 * widths.length + "em)";
    window.clearTimeout(this.drawing);
    var drawn = Math.min(rows.length, FIRST_ROWS);
    this.body.innerHTML = rows
      .slice(0, drawn)
      .map(function (r, i) {
        return rowHtml(r, cells[i]);
      })
      .join("");
    var root = this.root;
    function more() {
      var next = Math.min(rows.length, drawn + ROW_CHUNK);
      var html = "";
      for (var i = drawn; i < next; i += 1) html += rowHtml(rows[i], cells[i]);
      self.body.insertAdjacentHTML("beforeend", html);
      drawn = next;
      if (drawn < rows.length) self.drawing = window.setTimeout(more, 0);
      else root.setAttribute("data-drawn", "all");
    }
    if (drawn < rows.length) {
      root.setAttribute("data-drawn", "partial");
      this.drawing = window.setTimeout(more, 0);
    } else {
      root.setAttribute("data-drawn", "all");
    }
  };

  /** The smallest round stride that labels [low, high] with at most `most` labels, each
   * a multiple of the stride (so the labels read 2^0, 2^-50, 2^-100, not 2^-93, 2^-65). */
  function niceStride(low, high, most) {
    for (var i = 0; i < NICE.length; i += 1) {
      var stride = NICE[i];
      if (Math.ceil(high / stride) - Math.floor(low / stride) + 1 <= most) return stride;
    }
    return Math.ceil((high - low) / (most - 1));
  }

  /** The tick label 2^k, the power raised. */
  function powerLabel(x, y) {
    var label = svg("text", { x: x, y: y, class: "amp-sp-tick", "text-anchor": "end" }, "2");
    label.appendChild(svg("tspan", { dy: "-5", class: "amp-sp-power" }, ""));
    return label;
  }

  Playground.prototype.drawPlot = function (rows) {
    var plot = this.plot;
    while (plot.firstChild) plot.removeChild(plot.firstChild);
    // Drawn at the figure's width in pixels, so the labels are as large on a phone.
    var width = Math.max(260, Math.round(this.figure.clientWidth) || 640);
    var height = 250;
    plot.setAttribute("viewBox", "0 0 " + width + " " + height);
    var left = 46;
    var right = width - 10;
    var top = 12;
    var bottom = height - 40;
    var positive = rows.filter(function (r) {
      return r.scale_used > 0;
    });
    var logs = positive.map(function (r) {
      return Math.log2(r.scale_used);
    });
    var low = logs.length ? Math.floor(Math.min.apply(null, logs)) : 0;
    var high = logs.length ? Math.ceil(Math.max.apply(null, logs)) : 1;
    if (high - low < 2) {
      low -= 1;
      high += 1;
    }
    // Labelled at the multiples of a round stride: the axis starts and ends on a label,
    // so the highest scale is always under a labelled line and the lowest above one.
    var stride = niceStride(low, high, TICKS_MAX);
    low = stride * Math.floor(low / stride);
    high = stride * Math.ceil(high / stride);
    if (high === low) high = low + stride;
    var hasZero = positive.length < rows.length;
    var axisBottom = hasZero ? bottom - 22 : bottom;
    function x(step) {
      return left + ((step - 1) / Math.max(1, rows.length)) * (right - left);
    }
    function y(scale) {
      if (scale === 0) return bottom;
      return axisBottom - ((Math.log2(scale) - low) / (high - low)) * (axisBottom - top);
    }
    plot.appendChild(svg("line", { x1: left, y1: top, x2: left, y2: bottom, class: "amp-sp-axis" }));
    plot.appendChild(svg("line", { x1: left, y1: bottom, x2: right, y2: bottom, class: "amp-sp-axis" }));
    for (var k = low; k <= high; k += stride) {
      var yk = y(Math.pow(2, k));
      plot.appendChild(svg("line", { x1: left, y1: yk, x2: right, y2: yk, class: "amp-sp-grid" }));
      var label = plot.appendChild(powerLabel(left - 6, yk + 4));
      label.lastChild.textContent = String(k);
    }
    if (hasZero) {
      plot.appendChild(svg("text", { x: left - 6, y: bottom + 4, class: "amp-sp-tick", "text-anchor": "end" }, "0"));
    }
    var path = "";
    rows.forEach(function (r, i) {
      var yy = y(r.scale_used);
      path += (i ? " L" : "M") + x(r.step) + " " + yy + " L" + x(r.step + 1) + " " + yy;
    });
    plot.appendChild(svg("path", { d: path, class: "amp-sp-line" }));
    rows.forEach(function (r) {
      if (!r.skipped) return;
      var cx = (x(r.step) + x(r.step + 1)) / 2;
      var cy = y(r.scale_used);
      var d = 4.5;
      var cross =
        "M" + (cx - d) + " " + (cy - d) + " L" + (cx + d) + " " + (cy + d) +
        " M" + (cx - d) + " " + (cy + d) + " L" + (cx + d) + " " + (cy - d);
      plot.appendChild(svg("path", { d: cross, class: "amp-sp-cross" }));
    });
    // Step 1, then round steps (50, 100, ...), as many as fit about 55 pixels apart.
    var labels = Math.max(2, Math.floor((right - left) / 55));
    var labelStride = niceStride(1, rows.length, labels);
    var marks = [1];
    for (var s = labelStride; s <= rows.length; s += labelStride) {
      if (s - 1 >= labelStride / 2) marks.push(s); // not crowding step 1
    }
    marks.forEach(function (mark) {
      // a label that would run past the plot's right edge ends at it instead
      var at = x(mark);
      var end = at + 4 * String(mark).length > width - 2;
      var step = svg("text", {
        x: end ? width - 2 : at, y: bottom + 16, class: "amp-sp-tick", "text-anchor": end ? "end" : "middle",
      }, String(mark));
      plot.appendChild(step);
    });
    plot.appendChild(
      svg("text", { x: (left + right) / 2, y: bottom + 34, class: "amp-sp-tick", "text-anchor": "middle" }, "step")
    );
  };

  Playground.prototype.drawStrip = function (schedule) {
    var strip = this.strip;
    var shown = Math.min(schedule.length, STRIP_LIMIT);
    var focused = strip.contains(document.activeElement) ? document.activeElement.getAttribute("data-step") : null;
    while (strip.children.length > shown) strip.removeChild(strip.lastChild);
    while (strip.children.length < shown) {
      var step = strip.children.length + 1;
      var button = make("button", { type: "button", class: "amp-sp-toggle", "data-step": String(step), tabindex: "-1" });
      button.appendChild(make("span", { class: "amp-vh" }, "Step " + step));
      button.appendChild(make("span", { class: "amp-sp-mark", "aria-hidden": "true" }));
      strip.appendChild(button);
    }
    var active = focused && Number(focused) <= shown ? Number(focused) : 1;
    for (var i = 0; i < shown; i += 1) {
      var toggle = strip.children[i];
      toggle.setAttribute("aria-pressed", schedule[i] ? "true" : "false");
      toggle.lastChild.textContent = schedule[i] ? "x" : "\u00b7";
      toggle.setAttribute("tabindex", i + 1 === active ? "0" : "-1");
    }
    this.stripNote.textContent =
      schedule.length > STRIP_LIMIT
        ? "The toggles show the first " + STRIP_LIMIT + " of " + schedule.length + " steps; edit the pattern for the rest."
        : "";
    this.stripNote.hidden = schedule.length <= STRIP_LIMIT;
  };

  Playground.prototype.focusStep = function (index) {
    var buttons = this.strip.children;
    for (var i = 0; i < buttons.length; i += 1) buttons[i].setAttribute("tabindex", i === index ? "0" : "-1");
    buttons[index].focus();
  };

  /** Toggle one step between clean and overflow, in the pattern too. */
  Playground.prototype.toggle = function (step) {
    var got = readSteps(this.pattern.value, this.maxSteps);
    if (!got.value) return; // the pattern has a problem the reader is shown; fix that first
    got.value[step - 1] = !got.value[step - 1];
    this.pattern.value = patternOf(got.value);
    this.update();
    this.focusStep(step - 1);
  };

  Playground.prototype.fill = function () {
    var every = readWhole("Overflow every", this.every.input.value);
    var count = readWhole("Run length", this.count.input.value);
    if (!count.error && count.value > this.maxSteps) {
      count = { error: "Run length must be at most " + this.maxSteps + ", got " + count.value };
    }
    setError(this.every.input, this.every.error, every.error);
    setError(this.count.input, this.count.error, count.error);
    if (every.error || count.error) {
      this.announce(every.error || count.error);
      return;
    }
    var schedule = [];
    for (var step = 1; step <= count.value; step += 1) schedule.push(step % every.value === 0);
    this.pattern.value = patternOf(schedule);
    this.update();
  };

  Playground.prototype.announce = function (text) {
    var live = this.liveRegion;
    this.summary.textContent = text;
    window.clearTimeout(this.pending);
    this.pending = window.setTimeout(function () {
      live.textContent = text;
    }, SUMMARY_DELAY_MS);
  };

  function start() {
    var roots = document.querySelectorAll(".amp-sp");
    for (var i = 0; i < roots.length; i += 1) new Playground(roots[i], i + 1);
  }

  window.ampScalerPlayground = { simulate: simulate };

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
