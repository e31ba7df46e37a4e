/* The bit explorer: type a number, see what up to six formats store for it.
 *
 * The page holds a complete static table (computed at build time by
 * amp_lesson.formats) inside each `.amp-bx`; this script hides it and builds
 * the live explorer in its place from native controls: a labelled text input
 * that stays in view (sticky) with a one-line answer for the first format
 * shown, buttons that type the page's suggested values, a checkbox per format
 * (the reader picks which are shown; the page says which start shown, FP16
 * first), one toolbar of bit buttons per format (one Tab stop each; arrow
 * keys move, Enter or Space flips a bit), the facts per format, a number line
 * of the formats' ranges and a polite live region with a one-line summary.
 * The arithmetic is amp-floats.js's, which the browser tests compare with
 * amp_lesson.formats.store value by value.
 */
(function () {
  "use strict";

  var floats = window.ampFloats;
  var SUMMARY_DELAY_MS = 400; // let a reader finish typing before the summary is read out
  var LINE_MIN = -150; // the number line runs from 2**-150 ...
  var LINE_MAX = 129; // ... to 2**129, past FP32's range at both ends
  var TICKS = [-40, -20, 0, 20]; // powers of ten marked on the line

  function make(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) {
      if (attrs[name] !== null && attrs[name] !== undefined) node.setAttribute(name, attrs[name]);
    });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  /* The theme's icon script watches the whole page for added nodes; changing a
   * text node's data in place, and only when it differs, keeps it out of the way. */
  function setText(node, text) {
    var first = node.firstChild;
    if (first && first === node.lastChild && first.nodeType === Node.TEXT_NODE) {
      if (first.data !== text) first.data = text;
    } else {
      node.textContent = text;
    }
  }

  function setAttr(node, name, value) {
    if (node.getAttribute(name) !== value) node.setAttribute(name, value);
  }

  function hiddenText(text) {
    return make("span", { class: "amp-vh" }, text);
  }

  function percent(log2) {
    var clamped = Math.min(LINE_MAX, Math.max(LINE_MIN, log2));
    return ((clamped - LINE_MIN) / (LINE_MAX - LINE_MIN)) * 100 + "%";
  }

  function patternText(pattern, spec) {
    var hex = pattern.toString(16);
    var width = Math.ceil(spec.bits / 4);
    while (hex.length < width) hex = "0" + hex;
    return (spec.name === "fp32" ? "" : spec.prefix + ":") + "0x" + hex;
  }

  /* ------------------------------------------------------------ one format */

  function FormatRow(explorer, spec) {
    this.spec = spec;
    this.buttons = [];
    var uid = explorer.uid + "-" + spec.name;
    var item = make("li", { class: "amp-bx-fmt", "data-format": spec.name });
    var head = make("div", { class: "amp-bx-head" });
    head.appendChild(make("span", { class: "amp-bx-name", id: uid + "-name" }, spec.label));
    // The layout, each part underlined in the colour of its bits below.
    var layout = head.appendChild(make("span", { class: "amp-bx-layout" }));
    layout.appendChild(make("span", { class: "amp-bx-key amp-bx-sign" }, "1 sign"));
    layout.appendChild(document.createTextNode(", "));
    layout.appendChild(make("span", { class: "amp-bx-key amp-bx-exponent" }, spec.exponent_bits + " exponent"));
    layout.appendChild(document.createTextNode(", "));
    layout.appendChild(make("span", { class: "amp-bx-key amp-bx-mantissa" }, spec.mantissa_bits + " mantissa"));
    layout.appendChild(document.createTextNode(" bits"));
    item.appendChild(head);

    var bits = make("div", {
      class: "amp-bx-bits",
      role: "toolbar",
      "aria-label": spec.label + " bits: arrow keys move, Enter or Space flips a bit",
    });
    var groups = [
      ["sign", 1],
      ["exponent", spec.exponent_bits],
      ["mantissa", spec.mantissa_bits],
    ];
    var self = this;
    groups.forEach(function (group) {
      var box = make("span", { class: "amp-bx-group amp-bx-" + group[0] });
      for (var k = 0; k < group[1]; k += 1) {
        var index = self.buttons.length;
        var place = group[1] > 1 ? " bit " + (k + 1) + " of " + group[1] : " bit";
        var button = make("button", {
          type: "button",
          class: "amp-bx-bit",
          tabindex: index === 0 ? "0" : "-1",
          "data-index": String(index),
        });
        button.appendChild(hiddenText(spec.label + " " + group[0] + place + ": "));
        button.appendChild(make("span", { class: "amp-bx-digit" }, "0"));
        box.appendChild(button);
        self.buttons.push(button);
      }
      bits.appendChild(box);
    });
    bits.addEventListener("click", function (event) {
      var button = event.target.closest("button.amp-bx-bit");
      if (button) explorer.flip(self, Number(button.getAttribute("data-index")));
    });
    bits.addEventListener("keydown", function (event) {
      var button = event.target.closest("button.amp-bx-bit");
      if (!button) return;
      var index = Number(button.getAttribute("data-index"));
      var next = { ArrowLeft: index - 1, ArrowRight: index + 1, Home: 0, End: self.buttons.length - 1 }[
        event.key
      ];
      if (next === undefined) return;
      event.preventDefault();
      self.focus(Math.max(0, Math.min(self.buttons.length - 1, next)));
    });
    item.appendChild(bits);

    var facts = make("dl", { class: "amp-bx-facts" });
    this.cells = {};
    [
      ["stored", "stored"],
      ["rel", "relative error"],
      ["class", "class"],
      ["event", "event"],
    ].forEach(function (fact) {
      var pair = make("div", { class: "amp-bx-fact" });
      pair.appendChild(make("dt", {}, fact[1]));
      self.cells[fact[0]] = pair.appendChild(make("dd", { class: "amp-bx-" + fact[0] }));
      facts.appendChild(pair);
    });
    item.appendChild(facts);
    this.item = item;
  }

  FormatRow.prototype.focus = function (index) {
    this.buttons.forEach(function (button, i) {
      button.setAttribute("tabindex", i === index ? "0" : "-1");
    });
    this.buttons[index].focus();
  };

  FormatRow.prototype.show = function (stored, texts) {
    if (stored.pattern === null) return this.showNothing(stored, texts);
    var digits = stored.sign + stored.exponent + stored.mantissa;
    var before = this.digits || "";
    this.pattern = stored.pattern;
    this.digits = digits;
    this.buttons.forEach(function (button, i) {
      if (before[i] === digits[i]) return; // touch only the bits that changed
      setText(button.lastChild, digits[i]);
      button.classList.toggle("amp-bx-one", digits[i] === "1");
    });
    var shown = floats.pyRepr(stored.stored);
    var rel = floats.pyRepr(stored.rel_error);
    var classText = texts.classText(stored);
    setText(this.cells.stored, shown);
    setText(this.cells.rel, floats.formatG(stored.rel_error, 3));
    setText(this.cells["class"], classText);
    setText(this.cells.event, texts.eventText(stored));
    var item = this.item;
    setAttr(item, "data-stored", shown);
    setAttr(item, "data-bits", digits);
    setAttr(item, "data-kind", stored.kind);
    setAttr(item, "data-event", stored.event);
    setAttr(item, "data-rel", rel);
    setAttr(item, "data-class", classText);
    setAttr(item, "class", "amp-bx-fmt amp-bx-is-" + stored.event);
  };

  /** A NaN in a format that has none (FP4 E2M1): no bits, and the event says why. */
  FormatRow.prototype.showNothing = function (stored, texts) {
    this.pattern = null;
    this.digits = "";
    this.buttons.forEach(function (button) {
      setText(button.lastChild, "\u00b7");
      button.classList.remove("amp-bx-one");
    });
    var self = this;
    ["stored", "rel", "class"].forEach(function (cell) {
      setText(self.cells[cell], texts.notStored);
    });
    setText(this.cells.event, texts.eventText(stored));
    var item = this.item;
    setAttr(item, "data-stored", texts.notStored);
    setAttr(item, "data-bits", "");
    setAttr(item, "data-kind", stored.kind);
    setAttr(item, "data-event", stored.event);
    setAttr(item, "data-rel", texts.notStored);
    setAttr(item, "data-class", texts.notStored);
    setAttr(item, "class", "amp-bx-fmt amp-bx-is-" + stored.event);
  };

  /* ------------------------------------------------------------ the explorer */

  function Explorer(root, serial) {
    var data = JSON.parse(root.querySelector("script.amp-bx-data").textContent);
    this.root = root;
    this.uid = root.id || "amp-bx-" + serial;
    this.formats = {};
    var self = this;
    data.formats.forEach(function (spec) {
      self.formats[spec.name] = spec;
    });
    this.prefixes = data.prefixes;
    this.texts = {
      notStored: data.not_stored,
      classText: function (s) {
        return s.event === "saturated" ? "saturated" : data.class_text[s.kind];
      },
      eventText: function (s) {
        if (s.event === "overflow" && s.stored !== s.stored) return "overflow to NaN";
        // An infinity is no exact value: what parses to one (inf, or 1e400, past float64's
        // range) and is stored as one overflowed. "exact" is for finite values only.
        if (s.event === "exact" && Math.abs(s.value) === Infinity) return data.event_text.overflow;
        return data.event_text[s.event];
      },
    };

    var live = make("div", { class: "amp-bx-live" });
    // The input and the answer for the first format shown stay in view while the
    // reader scrolls through the other formats.
    var sticky = live.appendChild(make("div", { class: "amp-bx-sticky" }));
    var field = make("div", { class: "amp-bx-field" });
    var inputId = this.uid + "-input";
    field.appendChild(make("label", { for: inputId, class: "amp-bx-label" }, "Your number"));
    this.input = make("input", {
      id: inputId,
      class: "amp-bx-input",
      type: "text",
      autocomplete: "off",
      autocapitalize: "off",
      spellcheck: "false",
      "aria-describedby": this.uid + "-help " + this.uid + "-error",
    });
    this.input.value = data.initial;
    field.appendChild(this.input);
    sticky.appendChild(field);
    this.headline = sticky.appendChild(make("p", { class: "amp-bx-headline", "aria-hidden": "true" }));
    if (data.examples && data.examples.length) {
      var tries = live.appendChild(make("div", { class: "amp-bx-tries", role: "group", "aria-label": "Values to try" }));
      tries.appendChild(make("span", { class: "amp-bx-tries-label", "aria-hidden": "true" }, "Try:"));
      data.examples.forEach(function (text) {
        var button = tries.appendChild(
          make("button", { type: "button", class: "amp-bx-try", "aria-label": "Try " + text }, text)
        );
        button.addEventListener("click", function () {
          self.input.value = text;
          self.update();
        });
      });
    }
    live.appendChild(
      make(
        "p",
        { id: this.uid + "-help", class: "amp-bx-help" },
        "A decimal (0.1, -2.5e-8, -0), inf, nan, or a bit pattern: 0x3f800000 is an FP32 " +
          "pattern, fp16:0x3c00 another format's. A decimal is read as a Python float and " +
          "rounded to each format as torch rounds a float64 tensor: first to FP32, then to the format."
      )
    );
    this.error = live.appendChild(make("p", { id: this.uid + "-error", class: "amp-bx-error" }));
    this.error.hidden = true;

    this.results = live.appendChild(make("div", { class: "amp-bx-results" }));
    var source = this.results.appendChild(make("p", { class: "amp-bx-source" }, "Read as the Python float "));
    this.sourceValue = source.appendChild(make("code", {}, ""));
    this.sourceNote = source.appendChild(make("span", {}, "."));
    var shown = data.shown || data.show;
    var picker = make("fieldset", { class: "amp-bx-picker" });
    picker.appendChild(make("legend", {}, "Formats shown"));
    this.results.insertBefore(picker, source);
    var list = this.results.appendChild(make("ul", { class: "amp-bx-formats" }));
    this.rows = data.show.map(function (name) {
      var row = new FormatRow(self, self.formats[name]);
      list.appendChild(row.item);
      var id = self.uid + "-show-" + name;
      var choice = picker.appendChild(make("span", { class: "amp-bx-choice" }));
      row.checkbox = choice.appendChild(make("input", { type: "checkbox", id: id, value: name }));
      row.checkbox.checked = shown.indexOf(name) !== -1;
      choice.appendChild(make("label", { for: id }, self.formats[name].label));
      row.checkbox.addEventListener("change", function () {
        self.showFormats();
      });
      return row;
    });
    this.results.appendChild(this.numberLine(data.show));
    this.summary = live.appendChild(
      make("p", { class: "amp-bx-summary", "aria-live": "polite", role: "status" })
    );

    root.querySelector(".amp-bx-static").hidden = true;
    root.appendChild(live);
    root.classList.add("amp-bx-ready");

    this.input.addEventListener("input", function () {
      self.update();
    });
    this.showFormats();
    this.update();
  }

  /** Show the formats whose box is ticked (the number line too); the headline follows,
   * unless the input cannot be read (then the last answer stays, marked stale). */
  Explorer.prototype.showFormats = function () {
    var self = this;
    this.rows.forEach(function (row, i) {
      row.item.hidden = !row.checkbox.checked;
      self.lineRows[i].hidden = !row.checkbox.checked;
    });
    if (this.source && !this.invalid) this.show(this.source);
  };

  Explorer.prototype.numberLine = function (names) {
    var self = this;
    var figure = make("figure", { class: "amp-bx-line" });
    var graphic = figure.appendChild(make("div", { class: "amp-bx-line-graphic", "aria-hidden": "true" }));
    this.markers = [];
    this.lineRows = [];
    names.forEach(function (name) {
      var spec = self.formats[name];
      var row = graphic.appendChild(make("div", { class: "amp-bx-line-row" }));
      self.lineRows.push(row);
      row.appendChild(make("span", { class: "amp-bx-line-label" }, spec.label));
      var track = row.appendChild(make("span", { class: "amp-bx-line-track" }));
      var low = Math.log2(spec.smallest_subnormal);
      var normal = Math.log2(spec.smallest_normal);
      var high = Math.log2(spec.max);
      var sub = track.appendChild(make("span", { class: "amp-bx-line-sub" }));
      sub.style.left = percent(low);
      sub.style.width = "calc(" + percent(normal) + " - " + percent(low) + ")";
      var bar = track.appendChild(make("span", { class: "amp-bx-line-normal" }));
      bar.style.left = percent(normal);
      bar.style.width = "calc(" + percent(high) + " - " + percent(normal) + ")";
      self.markers.push(track.appendChild(make("span", { class: "amp-bx-line-marker" })));
    });
    var axis = graphic.appendChild(make("div", { class: "amp-bx-line-row amp-bx-line-axis" }));
    axis.appendChild(make("span", { class: "amp-bx-line-label" }));
    var ticks = axis.appendChild(make("span", { class: "amp-bx-line-track" }));
    TICKS.forEach(function (power) {
      var tick = ticks.appendChild(make("span", { class: "amp-bx-line-tick" }, power ? "1e" + power : "1"));
      tick.style.left = percent(power * Math.log2(10));
    });
    figure.appendChild(
      make(
        "figcaption",
        {},
        "Each format's range of magnitudes on a log scale: the pale start of a bar holds its " +
          "subnormals, the solid part its normal numbers up to the largest. The vertical mark " +
          "is the size of your number."
      )
    );
    return figure;
  };

  /** Read the input and show every format; an unreadable text shows a message instead. */
  Explorer.prototype.update = function () {
    var source;
    try {
      source = floats.readNumber(this.input.value, this.formats, this.prefixes);
    } catch (problem) {
      if (!(problem instanceof floats.InputError)) throw problem;
      this.input.setAttribute("aria-invalid", "true");
      this.error.textContent = problem.message;
      this.error.hidden = false;
      this.results.classList.add("amp-bx-stale");
      this.headline.classList.add("amp-bx-stale");
      this.invalid = true;
      this.announce(problem.message);
      return;
    }
    this.input.removeAttribute("aria-invalid");
    this.error.hidden = true;
    this.error.textContent = "";
    this.results.classList.remove("amp-bx-stale");
    this.headline.classList.remove("amp-bx-stale");
    this.invalid = false;
    this.source = source;
    this.show(source);
  };

  Explorer.prototype.show = function (source) {
    var self = this;
    var shown = floats.pyRepr(source.value);
    setText(this.sourceValue, shown);
    // A decimal past float64's largest value (1e400) is read as inf, as Python reads it.
    var decimal = /^[+-]?(?:[0-9]|\.[0-9])/.test(this.input.value.trim());
    var note = ".";
    if (source.nan && source.sign) note = " (a NaN with its sign bit set).";
    else if (decimal && Math.abs(source.value) === Infinity) {
      note = " (the decimal is past float64's largest value, about 1.8e308, so it overflows to " +
        shown + ").";
    }
    setText(this.sourceNote, note);
    setAttr(this.root, "data-value", shown);
    var events = [];
    var headline = "";
    this.rows.forEach(function (row, i) {
      var stored = floats.store(source, row.spec);
      row.show(stored, self.texts);
      if (!row.checkbox.checked) return;
      if (!headline) {
        headline =
          stored.pattern === null
            ? row.spec.label + " stores nothing (" + self.texts.eventText(stored) + ")"
            : row.spec.label + " stores " + floats.pyRepr(stored.stored) + " (" +
              self.texts.eventText(stored) + ")";
      }
      events.push(row.spec.label + " " + self.texts.eventText(stored));
      var marker = self.markers[i];
      var magnitude = Math.abs(source.value);
      marker.hidden = !(magnitude > 0); // no mark for zero or NaN
      if (magnitude > 0) {
        marker.style.left = percent(magnitude === Infinity ? LINE_MAX : Math.log2(magnitude));
      }
    });
    setText(this.headline, headline || "No format is shown: tick one below.");
    this.announce(shown + ": " + (events.length ? events.join(", ") : "no format shown") + ".");
  };

  Explorer.prototype.announce = function (text) {
    var summary = this.summary;
    window.clearTimeout(this.pending);
    this.pending = window.setTimeout(function () {
      summary.textContent = text;
    }, SUMMARY_DELAY_MS);
  };

  /** Flip one bit of a format's stored pattern: that pattern becomes the number. */
  Explorer.prototype.flip = function (row, index) {
    var place = floats.pow2(row.spec.bits - 1 - index);
    var from = row.pattern === null ? 0 : row.pattern; // no bits shown: start from zero
    var bit = Math.floor(from / place) % 2;
    var pattern = from + (bit ? -place : place);
    this.input.value = patternText(pattern, row.spec);
    this.update();
    row.focus(index);
  };

  function start() {
    var roots = document.querySelectorAll(".amp-bx");
    for (var i = 0; i < roots.length; i += 1) new Explorer(roots[i], i + 1);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
