/* Self-checks: upgrade the static markup of amp_book.selfcheck.
 *
 * The server-rendered page is complete without this script: every question is
 * there and every answer sits in a native <details>. This script finds each
 * `.sc[data-sc-kind]` block and turns it into an interactive widget built from
 * native controls (form, fieldset, legend, radio, checkbox, button, textarea),
 * so it works by keyboard alone. A reader's answers are kept in localStorage
 * under the page's path and the widget's id, and can be reset per widget or
 * for the whole page. No framework, nothing fetched.
 */
(function () {
  "use strict";

  var STORE_PREFIX = "amp-lesson:selfcheck:v1:";
  var PAGE_PREFIX = STORE_PREFIX + window.location.pathname + "#";
  var DEFAULT_TOLERANCE = 0.005; // relative, for a refill cell whose number is not exact

  /* ---------------------------------------------------------------- storage
   * localStorage can be missing, blocked (privacy settings, sandboxed frames)
   * or full; every access is guarded so the widgets still work for the visit. */
  var storage = (function () {
    var backend = null;
    try {
      backend = window.localStorage;
      var probe = STORE_PREFIX + "probe";
      backend.setItem(probe, "1");
      backend.removeItem(probe);
    } catch (error) {
      backend = null;
    }
    return {
      available: backend !== null,
      read: function (key) {
        if (!backend) return null;
        try {
          var raw = backend.getItem(key);
          return raw ? JSON.parse(raw) : null;
        } catch (error) {
          return null;
        }
      },
      write: function (key, value) {
        if (!backend) return;
        try {
          backend.setItem(key, JSON.stringify(value));
        } catch (error) {
          /* Full or blocked: the answer lives as long as the page. */
        }
      },
      remove: function (key) {
        if (!backend) return;
        try {
          backend.removeItem(key);
        } catch (error) {
          /* Nothing to do: it cannot be read back either. */
        }
      },
      keysWithPrefix: function (prefix) {
        var keys = [];
        if (!backend) return keys;
        try {
          for (var i = 0; i < backend.length; i += 1) {
            var key = backend.key(i);
            if (key && key.indexOf(prefix) === 0) keys.push(key);
          }
        } catch (error) {
          /* Blocked while iterating: report what was found. */
        }
        return keys;
      },
    };
  })();

  /* -------------------------------------------------------------- DOM help */

  /** Create an element: make("p", {class: "x", "aria-live": "polite"}, "text", child). */
  function make(tag, attrs) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) {
      var value = attrs[name];
      if (value === false || value === null || value === undefined) return;
      if (name === "class") node.className = value;
      else if (value === true) node.setAttribute(name, "");
      else node.setAttribute(name, String(value));
    });
    for (var i = 2; i < arguments.length; i += 1) {
      var child = arguments[i];
      if (child === null || child === undefined) continue;
      node.append(child);
    }
    return node;
  }

  /** A deep copy of server-rendered content, with ids removed so none repeat. */
  function copyOf(node) {
    var copy = node.cloneNode(true);
    if (copy.removeAttribute) copy.removeAttribute("id");
    copy.querySelectorAll("[id]").forEach(function (inner) {
      inner.removeAttribute("id");
    });
    copy.querySelectorAll("details").forEach(function (inner) {
      inner.removeAttribute("hidden");
    });
    return copy;
  }

  function moveChildren(from, to) {
    while (from.firstChild) to.appendChild(from.firstChild);
  }

  /** A verdict line: an icon and a word, so it never relies on colour alone. */
  function verdict(kind, word, text) {
    var icons = { ok: "\u2713", no: "\u2717", none: "\u2013" };
    var line = make("p", { class: "sc-verdict sc-verdict-" + kind });
    line.append(
      make("span", { class: "sc-icon", "aria-hidden": "true" }, icons[kind]),
      " ",
      make("strong", {}, word)
    );
    if (text) line.append(" ", text);
    return line;
  }

  function button(label, attrs) {
    var node = make("button", Object.assign({ type: "button", class: "sc-button" }, attrs || {}));
    node.textContent = label;
    return node;
  }

  function textOf(node) {
    return node ? node.textContent.replace(/\s+/g, " ").trim() : "";
  }

  /** The question's sentence moved into a <legend> that labels the control group. */
  function legendFrom(question) {
    var legend = make("legend", { class: "sc-legend" });
    var sentence = question.querySelector(".sc-question-text");
    if (sentence) {
      moveChildren(sentence, legend);
      sentence.remove();
    }
    return legend;
  }

  /* ------------------------------------------------------ comparing values
   * A refill cell's true value is a number when its text reads as one ("65536",
   * "0.173287", "3.4e+38", "5 bits"), else words, compared up to case, spacing and
   * quotes. A number written as a whole number, or one that is a power of two,
   * must be matched exactly (65535 is not 65536); any other number, rounded as the
   * book prints it, within a relative tolerance (the directive's :tolerance:, else
   * half a percent), which the instructions state. What a reader types is read in
   * the forms people write numbers in: 65,504; 6.1e-5; 6.1 x 10^-5; 2^16, 2**16 and
   * 2¹⁶; 16k, 64K, 1M (a thousand or 1024, a million or 2^20: either reading
   * counts); and small sums such as ln2/4, ln(2)/4, 1/8 or 65536/4 (+ - * / ^,
   * brackets, ln log log2 log10 exp sqrt, e and pi), worked out without eval. A
   * number followed by words ("5 bits") is read as the number. When a cell
   * differs, the reader is told why, without the true value until it is shown. */

  var SUPERSCRIPTS = "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079";
  var SUPERSCRIPT_RUN = /[\u207b\u207a]?[\u2070\u00b9\u00b2\u00b3\u2074-\u2079]+/g;
  var NUMBER_AT = /^(?:\d{1,3}(?:[,\u202f\u2009 _]\d{3})+(?!\d)|\d+)(?:\.\d*)?(?:[eE][-+]?\d+)?|^\.\d+(?:[eE][-+]?\d+)?/;
  var NAME_AT = /^(?:log10|log2|sqrt|exp|log|ln|pi|\u03c0|e|x)(?![a-z])/i;
  var SUFFIX_AT = /^([kKMG])(?![A-Za-z])/;
  var SUFFIXES = { k: [1e3, 1024], K: [1e3, 1024], M: [1e6, 1048576], G: [1e9, 1073741824] };
  var FUNCTIONS = {
    ln: Math.log, log: Math.log, log2: Math.log2, log10: Math.log10, exp: Math.exp, sqrt: Math.sqrt,
  };

  /** The text with superscript powers written out ("2¹⁶" is "2^(16)"), NFKC-normalised. */
  function plainText(text) {
    return String(text)
      .replace(SUPERSCRIPT_RUN, function (run) {
        var digits = run.replace(/[\u207b\u207a]/, "").split("").map(function (c) {
          return SUPERSCRIPTS.indexOf(c);
        }).join("");
        return "^(" + (run[0] === "\u207b" ? "-" : "") + digits + ")";
      })
      .normalize("NFKC")
      .replace(/[\u2212\u2013]/g, "-")
      .replace(/[\u00d7\u00b7]/g, "*")
      .replace(/\u00f7/g, "/")
      .trim();
  }

  /** Tokens of a sum, or null: numbers (with a k/M/G suffix), names, operators, brackets. */
  function tokens(text) {
    var out = [];
    var rest = text;
    while (rest.length) {
      var space = /^\s+/.exec(rest);
      if (space) { rest = rest.slice(space[0].length); continue; }
      var number = NUMBER_AT.exec(rest);
      if (number) {
        var value = parseFloat(number[0].replace(/[,\u202f\u2009 _]/g, ""));
        rest = rest.slice(number[0].length);
        var suffix = SUFFIX_AT.exec(rest);
        if (suffix) rest = rest.slice(1);
        out.push({ type: "number", value: value, suffix: suffix ? suffix[1] : null });
        continue;
      }
      var name = NAME_AT.exec(rest);
      if (name) {
        var word = name[0].toLowerCase();
        rest = rest.slice(name[0].length);
        if (word === "x") out.push({ type: "op", op: "*" });
        else out.push({ type: "name", name: word === "\u03c0" ? "pi" : word });
        continue;
      }
      if (rest.slice(0, 2) === "**") { out.push({ type: "op", op: "^" }); rest = rest.slice(2); continue; }
      if ("+-*/^()".indexOf(rest[0]) !== -1) { out.push({ type: "op", op: rest[0] }); rest = rest.slice(1); continue; }
      return null;
    }
    return out.length ? out : null;
  }

  /** The value of a sum's tokens, a k read as `kilo` (1000 or 1024); NaN if it is not one. */
  function evaluate(list, binary) {
    var at = 0;
    function peek(op) { return at < list.length && list[at].type === "op" && list[at].op === op; }
    function sum() {
      var value = product();
      while (peek("+") || peek("-")) {
        var op = list[at++].op;
        var right = product();
        value = op === "+" ? value + right : value - right;
      }
      return value;
    }
    function product() {
      var value = signed();
      while (peek("*") || peek("/")) {
        var op = list[at++].op;
        var right = signed();
        value = op === "*" ? value * right : value / right;
      }
      return value;
    }
    function signed() {
      if (peek("-")) { at += 1; return -signed(); }
      if (peek("+")) { at += 1; return signed(); }
      return power();
    }
    function power() {
      var base = applied();
      if (peek("^")) { at += 1; return Math.pow(base, signed()); }
      return base;
    }
    function applied() {
      var token = list[at];
      if (token && token.type === "name" && FUNCTIONS[token.name]) {
        at += 1;
        return FUNCTIONS[token.name](applied());
      }
      return atom();
    }
    function atom() {
      var token = list[at++];
      if (!token) return NaN;
      if (token.type === "number") {
        return token.suffix ? token.value * SUFFIXES[token.suffix][binary ? 1 : 0] : token.value;
      }
      if (token.type === "name") return token.name === "pi" ? Math.PI : token.name === "e" ? Math.E : NaN;
      if (token.type === "op" && token.op === "(") {
        var inner = sum();
        if (!peek(")")) return NaN;
        at += 1;
        return inner;
      }
      return NaN;
    }
    var value = sum();
    return at === list.length ? value : NaN;
  }

  /** The number(s) a whole text reads as ([] if none): two for a "k" that may mean 1000 or 1024. */
  function readSum(text) {
    var list = tokens(text);
    if (!list) return [];
    var values = [evaluate(list, false)];
    if (list.some(function (t) { return t.suffix; })) values.push(evaluate(list, true));
    values = values.filter(function (v) { return isFinite(v); });
    return values.length === 2 && values[0] === values[1] ? values.slice(0, 1) : values;
  }

  /**
   * What a text reads as: {values, text} where `values` are the number(s) it may mean
   * (none for words) and `text` the part read. The whole text first, then with words
   * after the number dropped ("5 bits"); for a reader's answer (`loose`), then the
   * first number written anywhere in it ("about 3.4e38").
   */
  function readAmount(text, loose) {
    var plain = plainText(text);
    var values = readSum(plain);
    if (values.length) return { values: values, text: plain };
    var unit = /^(.*?\d.*?)\s+[A-Za-z][A-Za-z\s.]*$/.exec(plain);
    if (unit) {
      values = readSum(unit[1]);
      if (values.length) return { values: values, text: unit[1] };
    }
    if (loose) {
      var first = /(?:^|[^\w.^])([-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?)/.exec(plain);
      var value = first ? parseFloat(first[1].replace(/,/g, "")) : NaN;
      if (isFinite(value)) return { values: [value], text: first[1] };
    }
    return { values: [], text: plain };
  }

  function isPowerOfTwo(value) {
    if (!(value > 0) || !isFinite(value)) return false;
    var k = Math.round(Math.log2(value));
    return Math.pow(2, k) === value;
  }

  /** A refill cell's true value, as the comparison needs it. */
  function truthOf(text, tolerance) {
    var read = readAmount(text, false);
    if (read.values.length !== 1) return { words: true, text: text };
    var value = read.values[0];
    var written = read.text.replace(/[,\u202f\u2009 _]/g, "");
    var whole = /^[-+]?\d+$/.test(written) || /\^|\*\*/.test(written);
    return {
      words: false, text: text, value: value,
      exact: whole || isPowerOfTwo(Math.abs(value)),
      tolerance: tolerance,
    };
  }

  function normalText(text) {
    return text
      .normalize("NFKC")
      .toLowerCase()
      .replace(/[`"'\u2018\u2019\u201c\u201d]/g, "")
      .replace(/\s+/g, " ")
      .replace(/[.;]$/, "")
      .trim();
  }

  function close(a, b, tolerance) {
    if (a === b) return true;
    return Math.abs(a - b) <= tolerance * Math.max(Math.abs(a), Math.abs(b));
  }

  /** A number as a reason says it: at most six significant digits. */
  function shown(value) {
    if (value === Math.round(value) && Math.abs(value) < 1e15) return String(value);
    return String(parseFloat(value.toPrecision(6)));
  }

  function percent(tolerance) {
    return String(parseFloat((tolerance * 100).toPrecision(3))) + " %";
  }

  function quote(text) {
    return "\u201c" + text + "\u201d";
  }

  /**
   * Whether a reader's answer matches a cell's truth, and if not, why: {ok, why}.
   * `revealed`: the true value is on show, so the reason may name it.
   */
  function judgeCell(given, truth, revealed) {
    var typed = given.trim();
    if (!typed) return { ok: false, why: "" };
    if (normalText(typed) === normalText(truth.text)) return { ok: true, why: "" };
    if (truth.words) {
      if (readAmount(typed, false).values.length) return { ok: false, why: "Wants words, not a number." };
      return {
        ok: false,
        why: revealed
          ? quote(typed) + " is not " + quote(truth.text.trim()) + "."
          : "Not the words expected (case and spacing aside).",
      };
    }
    var read = readAmount(typed, true);
    if (!read.values.length) return { ok: false, why: "Could not read " + quote(typed) + " as a number." };
    var ok = read.values.some(function (value) {
      return truth.exact ? value === truth.value : close(value, truth.value, truth.tolerance);
    });
    if (ok) return { ok: true, why: "" };
    var asRead = read.values.map(shown).join(" or ");
    if (revealed) {
      if (truth.exact) return { ok: false, why: asRead + " is not " + shown(truth.value) + ": this answer must be exact." };
      var off = Math.abs(read.values[0] - truth.value) / Math.abs(truth.value);
      return {
        ok: false,
        why: asRead + " is " + percent(off) + " from " + shown(truth.value) + "; within " +
          percent(truth.tolerance) + " counts.",
      };
    }
    var rule = truth.exact ? "must be exact." : "must be within " + percent(truth.tolerance) + ".";
    var plain = read.values.length === 1 && shown(read.values[0]) === typed;
    return { ok: false, why: plain ? "Must" + rule.slice(4) : "Read as " + asRead + "; " + rule };
  }

  /** The instructions' words on how numbers are compared, for the truths of one table. */
  function comparingRule(truths) {
    var numbers = truths.filter(function (t) { return !t.words; });
    if (!numbers.length) return "";
    var exact = numbers.filter(function (t) { return t.exact; }).length;
    var rough = numbers.filter(function (t) { return !t.exact; });
    var forms = " Numbers may be typed as 65536, 2^16, 64k, 6.1e-5 or ln2/4.";
    if (!rough.length) return " Numbers must be exact." + forms;
    var within = percent(rough[0].tolerance);
    if (!exact) return " Numbers count within " + within + " of the true value." + forms;
    return " Whole numbers and powers of two must be exact; other numbers count within " + within + "." + forms;
  }

  /* ------------------------------------------------- state, Check and Reset
   * Every widget keeps one plain state object, stored under its id, and draws
   * itself from it with one render(state, moveFocus), so a reload, a reset and
   * a click all go through the same path. `track` is that shared wiring: a
   * change saves the state and redraws; Check (the form's submit) marks the
   * state checked and moves focus to the feedback; Reset forgets the state,
   * here and in storage, and puts focus back on the first control. */

  function feedbackBox() {
    return make("div", { class: "sc-feedback", "aria-live": "polite", tabindex: "-1" });
  }

  function resetButton(what) {
    return button("Reset", { class: "sc-button sc-reset", "aria-label": "Reset this " + what });
  }

  /**
   * options: blank() -> a fresh state; render(state, moveFocus); resetButton;
   * focusAfterReset() -> the control to focus after a reset; checkForm (optional):
   * the form whose submit is the widget's Check.
   * Returns {state, set(state, moveFocus), keep(state), reset()}: `set` saves
   * and redraws, `keep` only saves (typing in a box, which must keep its focus).
   */
  function track(ctx, options) {
    var widget = {
      state: ctx.load() || options.blank(),
      set: function (state, moveFocus) {
        widget.state = state;
        ctx.save(state);
        options.render(state, moveFocus);
      },
      keep: function (state) {
        widget.state = state;
        ctx.save(state);
      },
      reset: function () {
        widget.state = options.blank();
        ctx.clear();
        options.render(widget.state, false);
      },
    };
    if (options.checkForm) {
      options.checkForm.addEventListener("submit", function (event) {
        event.preventDefault();
        widget.set(Object.assign({}, widget.state, { checked: true }), true);
      });
    }
    options.resetButton.addEventListener("click", function () {
      widget.reset();
      var first = options.focusAfterReset();
      if (first) first.focus();
    });
    options.render(widget.state, false);
    return widget;
  }

  /* --------------------------------------------------------------- widgets
   * Each setup function takes the widget's root and a `ctx` with its id,
   * `load()`, `save(state)` and `clear()`, and returns {reset}. */

  function setupChoice(root, ctx) {
    if (root.dataset.scMode === "eliminate") return setupEliminate(root, ctx);
    var multiple = root.dataset.scMode === "multiple";
    var question = root.querySelector(".sc-question");
    var list = root.querySelector(".sc-options");
    var details = root.querySelector(".sc-answer");
    var explanation = details.querySelector(".sc-explanation");

    var form = make("form", { class: "sc-form", novalidate: true });
    var fieldset = make("fieldset", { class: "sc-fieldset" });
    fieldset.append(legendFrom(question));
    moveChildren(question, fieldset);
    fieldset.append(
      make("p", { class: "sc-instructions" },
        multiple ? "Choose every option that applies, then check." : "Choose one option, then check."),
      list
    );
    var check = button("Check", { type: "submit", class: "sc-button sc-primary" });
    var reset = resetButton("question");
    var feedback = feedbackBox();
    form.append(fieldset, make("div", { class: "sc-actions" }, check, reset), feedback);
    question.replaceWith(form);

    var options = Array.prototype.map.call(list.querySelectorAll(".sc-option"), function (li) {
      var key = li.dataset.scKey;
      var inputId = "sc-" + ctx.id + "-option-" + key;
      var input = make("input", {
        type: multiple ? "checkbox" : "radio",
        name: "sc-" + ctx.id,
        id: inputId,
        value: key,
        class: "sc-input",
      });
      var label = make("label", { for: inputId, class: "sc-option-label" });
      moveChildren(li, label);
      var mark = make("span", { class: "sc-mark", hidden: true });
      li.append(input, label, mark);
      return {
        key: key,
        li: li,
        input: input,
        mark: mark,
        correct: li.dataset.scCorrect === "true",
        note: details.querySelector('.sc-note[data-sc-for="' + key + '"]'),
      };
    });
    var rightKeys = options.filter(function (o) { return o.correct; }).map(function (o) { return o.key; });

    function render(state, moveFocus) {
      feedback.replaceChildren();
      options.forEach(function (option) {
        option.input.checked = state.selected.indexOf(option.key) !== -1;
        option.li.classList.remove("sc-right", "sc-wrong");
        option.mark.hidden = true;
        option.mark.replaceChildren();
      });
      if (!state.checked) return;
      if (!state.selected.length) {
        feedback.append(verdict("none", "No answer yet.", "Choose an option first."));
      } else if (multiple) {
        renderMultiple(state);
      } else {
        renderSingle(state);
      }
      if (moveFocus) feedback.focus();
    }

    function markOption(option, ok, words) {
      option.li.classList.add(ok ? "sc-right" : "sc-wrong");
      option.mark.hidden = false;
      option.mark.append(verdict(ok ? "ok" : "no", words));
    }

    function renderSingle(state) {
      var chosen = options.filter(function (o) { return o.key === state.selected[0]; })[0];
      if (!chosen) return;
      if (chosen.correct) {
        markOption(chosen, true, "Correct");
        feedback.append(verdict("ok", "Correct.", chosen.key + " is the answer."));
        if (explanation) feedback.append(copyOf(explanation));
      } else {
        markOption(chosen, false, "Not this one");
        feedback.append(verdict("no", "Not quite.", chosen.key + " is not the answer; try another option."));
        if (chosen.note) feedback.append(copyOf(chosen.note));
      }
    }

    function renderMultiple(state) {
      var ticked = options.filter(function (o) { return state.selected.indexOf(o.key) !== -1; });
      var wrongTicks = ticked.filter(function (o) { return !o.correct; });
      var found = ticked.length - wrongTicks.length;
      ticked.forEach(function (option) {
        markOption(option, option.correct, option.correct ? "Right to tick" : "Should not be ticked");
      });
      if (!wrongTicks.length && found === rightKeys.length) {
        feedback.append(verdict("ok", "Correct.", "You ticked every right option and no other."));
        if (explanation) feedback.append(copyOf(explanation));
        return;
      }
      var summary = found + " of " + rightKeys.length + " right options ticked";
      if (wrongTicks.length) summary += ", and " + wrongTicks.length + " that should not be";
      feedback.append(verdict("no", "Not quite.", summary + "."));
      wrongTicks.forEach(function (option) {
        if (option.note) feedback.append(copyOf(option.note));
      });
    }

    var widget = track(ctx, {
      blank: function () { return { selected: [], checked: false }; },
      render: render,
      checkForm: form,
      resetButton: reset,
      focusAfterReset: function () { return options[0].input; },
    });
    form.addEventListener("change", function () {
      widget.set({
        selected: options.filter(function (o) { return o.input.checked; }).map(function (o) { return o.key; }),
        checked: false,
      }, false);
    });
    return widget;
  }

  function setupEliminate(root, ctx) {
    var question = root.querySelector(".sc-question");
    var list = root.querySelector(".sc-options");
    var details = root.querySelector(".sc-answer");
    var explanation = details.querySelector(".sc-explanation");
    var answerLine = details.querySelector(".sc-answer-line");
    details.hidden = true; // the survivor is revealed by eliminating, not by a click

    var form = make("form", { class: "sc-form", novalidate: true });
    var fieldset = make("fieldset", { class: "sc-fieldset" });
    fieldset.append(legendFrom(question));
    moveChildren(question, fieldset);
    var reasonId = "sc-" + ctx.id + "-reason";
    var helpId = reasonId + "-help";
    var reason = make("input", {
      type: "text", id: reasonId, class: "sc-text", autocomplete: "off", "aria-describedby": helpId,
    });
    var reasonBox = make("div", { class: "sc-reason" },
      make("label", { for: reasonId }, "What rules an option out?"),
      reason,
      make("p", { class: "sc-help", id: helpId },
        "Say why first: the strike buttons work once you have typed a reason.")
    );
    fieldset.append(
      make("p", { class: "sc-instructions" },
        "Strike the wrong options one at a time, each with your reason. The one left standing is the answer."),
      reasonBox,
      list
    );
    var reset = resetButton("question");
    var feedback = feedbackBox();
    form.append(fieldset, feedback, make("div", { class: "sc-actions" }, reset));
    question.replaceWith(form);

    var options = Array.prototype.map.call(list.querySelectorAll(".sc-option"), function (li) {
      var key = li.dataset.scKey;
      var body = make("span", { class: "sc-option-body" });
      moveChildren(li, body);
      var strike = button("Strike " + key, { class: "sc-button sc-strike" });
      var struck = make("div", { class: "sc-struck-info", hidden: true });
      li.append(body, strike, struck);
      var option = {
        key: key, li: li, strike: strike, struck: struck,
        correct: li.dataset.scCorrect === "true",
        note: details.querySelector('.sc-note[data-sc-for="' + key + '"]'),
      };
      strike.addEventListener("click", function () { strikeOut(option); });
      return option;
    });
    var wrongCount = options.filter(function (o) { return !o.correct; }).length;

    function reasonFor(state, key) {
      var entry = state.struck.filter(function (s) { return s.key === key; })[0];
      return entry ? entry.reason : null;
    }

    function survivorKey() {
      return options.filter(function (o) { return o.correct; })[0].key;
    }

    function render(state, moveFocus) {
      var done = state.struck.length >= wrongCount;
      reason.value = state.draft;
      reasonBox.hidden = done;
      feedback.replaceChildren();
      options.forEach(function (option) {
        var given = reasonFor(state, option.key);
        option.li.classList.toggle("sc-struck", given !== null);
        option.li.classList.toggle("sc-survivor", done && option.correct);
        option.strike.hidden = given !== null || done;
        option.strike.disabled = !state.draft.trim();
        option.struck.replaceChildren();
        option.struck.hidden = true;
        if (given !== null) {
          option.struck.hidden = false;
          // Only a wrong option can be struck: a strike that stands is a right move, and
          // reads as one (the tick and colour of the feedback beside it).
          option.struck.append(verdict("ok", "Struck out.", "Rightly: your reason was \u201c" + given + "\u201d"));
          if (option.note) option.struck.append(copyOf(option.note));
        } else if (done && option.correct) {
          option.struck.hidden = false;
          option.struck.append(verdict("ok", "The survivor."));
        }
      });
      if (done) {
        feedback.append(verdict("ok", "Done.", "Only " + survivorKey() + " is left standing."));
        if (answerLine) feedback.append(copyOf(answerLine));
        if (explanation) feedback.append(copyOf(explanation));
      } else if (state.last && state.last.ok) {
        var left = wrongCount - state.struck.length;
        feedback.append(verdict("ok", "Struck " + state.last.key + ".",
          left + (left === 1 ? " wrong option is" : " wrong options are") + " still standing."));
      } else if (state.last) {
        feedback.append(verdict("no", "Not quite.",
          "Nothing rules out " + state.last.key + ". Read it again, then strike another option."));
      }
      if (moveFocus) feedback.focus();
    }

    var widget = track(ctx, {
      blank: function () { return { struck: [], draft: "", last: null }; },
      render: render,
      resetButton: reset,
      focusAfterReset: function () { return reason; },
    });

    function strikeOut(option) {
      var state = widget.state;
      var given = state.draft.trim();
      if (!given) return;
      if (option.correct) {
        widget.set(Object.assign({}, state, { last: { key: option.key, ok: false } }), true);
      } else {
        widget.set({
          struck: state.struck.concat([{ key: option.key, reason: given }]),
          draft: "",
          last: { key: option.key, ok: true },
        }, true);
      }
    }

    reason.addEventListener("input", function () {
      // Typing redraws nothing but the strike buttons, so focus stays in the box.
      widget.keep(Object.assign({}, widget.state, { draft: reason.value }));
      options.forEach(function (option) { option.strike.disabled = !widget.state.draft.trim(); });
    });
    form.addEventListener("submit", function (event) { event.preventDefault(); });
    return widget;
  }

  /** A text box whose content the reader commits before an answer is shown beside it. */
  function commitPanel(ctx, suffix, labelText, revealText) {
    var boxId = "sc-" + ctx.id + "-" + suffix;
    var box = make("textarea", { id: boxId, class: "sc-text", rows: "3" });
    var reveal = button(revealText, { class: "sc-button sc-primary", disabled: true });
    var label = make("label", { for: boxId }, labelText);
    var panel = make("div", { class: "sc-commit" }, label, box);
    return { box: box, reveal: reveal, panel: panel };
  }

  /** Wire a commit panel: typing keeps a draft, the reveal button commits it. */
  function wireCommit(commit, widget) {
    commit.box.addEventListener("input", function () {
      widget.keep(Object.assign({}, widget.state, { draft: commit.box.value }));
      commit.reveal.disabled = !widget.state.draft.trim();
    });
    commit.reveal.addEventListener("click", function () {
      var draft = widget.state.draft.trim();
      if (!draft) return;
      widget.set(Object.assign({}, widget.state, { committed: draft }), true);
    });
  }

  function comparison(committed, answerBody, yoursTitle) {
    return make("div", { class: "sc-compare" },
      make("div", { class: "sc-compare-yours" },
        make("p", { class: "sc-compare-title" }, yoursTitle),
        make("p", { class: "sc-committed" }, committed)),
      make("div", { class: "sc-compare-answer" },
        make("p", { class: "sc-compare-title" }, "The answer"),
        copyOf(answerBody)));
  }

  function setupPredict(root, ctx) {
    var details = root.querySelector(".sc-answer");
    var answerBody = details.querySelector(".sc-answer-body");
    details.hidden = true; // commit first: the answer is shown only beside a prediction
    var commit = commitPanel(ctx, "prediction", "Your prediction", "Reveal the answer");
    var reset = resetButton("question");
    var feedback = feedbackBox();
    var help = make("p", { class: "sc-help" }, "Write it down before you look: the answer opens once you have.");
    details.before(commit.panel, help, make("div", { class: "sc-actions" }, commit.reveal, reset), feedback);

    function render(state, moveFocus) {
      var revealed = state.committed !== null;
      commit.box.value = state.draft;
      commit.panel.hidden = revealed;
      help.hidden = revealed;
      commit.reveal.hidden = revealed;
      commit.reveal.disabled = !state.draft.trim();
      feedback.replaceChildren();
      if (revealed) feedback.append(comparison(state.committed, answerBody, "Your prediction"));
      if (moveFocus) feedback.focus();
    }
    var widget = track(ctx, {
      blank: function () { return { draft: "", committed: null }; },
      render: render,
      resetButton: reset,
      focusAfterReset: function () { return commit.box; },
    });
    wireCommit(commit, widget);
    return widget;
  }

  function setupSort(root, ctx) {
    var buckets = Array.prototype.map.call(root.querySelectorAll(".sc-buckets .sc-bucket-name"), textOf);
    var list = root.querySelector(".sc-items");
    var details = root.querySelector(".sc-answer");
    var explanation = details.querySelector(".sc-explanation");
    var form = make("form", { class: "sc-form", novalidate: true });
    list.replaceWith(form);
    var check = button("Check", { type: "submit", class: "sc-button sc-primary" });
    var reset = resetButton("question");
    var feedback = feedbackBox();
    form.append(
      make("p", { class: "sc-instructions" }, "Choose a bucket for each item, then check."),
      list, make("div", { class: "sc-actions" }, check, reset), feedback);

    var items = Array.prototype.map.call(list.querySelectorAll(".sc-item"), function (li) {
      var key = li.dataset.scKey;
      var text = li.querySelector(".sc-item-text");
      var group = make("fieldset", { class: "sc-bucket-choice" },
        make("legend", { class: "sc-visually-hidden" }, "Bucket for \u201c" + textOf(text) + "\u201d"));
      var inputs = buckets.map(function (bucket, index) {
        var inputId = "sc-" + ctx.id + "-item-" + key + "-" + index;
        var input = make("input", {
          type: "radio", name: "sc-" + ctx.id + "-item-" + key, id: inputId, value: bucket, class: "sc-input",
        });
        group.append(make("span", { class: "sc-chip" }, input, make("label", { for: inputId }, bucket)));
        return input;
      });
      var mark = make("div", { class: "sc-mark", hidden: true });
      li.append(group, mark);
      return {
        key: key, li: li, inputs: inputs, mark: mark, bucket: li.dataset.scBucket,
        note: details.querySelector('.sc-note[data-sc-for="' + key + '"]'),
      };
    });

    function render(state, moveFocus) {
      feedback.replaceChildren();
      var right = 0;
      items.forEach(function (item) {
        var chosen = state.assigned[item.key] || null;
        item.inputs.forEach(function (input) { input.checked = input.value === chosen; });
        item.li.classList.remove("sc-right", "sc-wrong");
        item.mark.replaceChildren();
        item.mark.hidden = !state.checked;
        if (!state.checked) return;
        if (chosen === null) {
          item.mark.append(verdict("none", "Not sorted yet."));
        } else if (chosen === item.bucket) {
          right += 1;
          item.li.classList.add("sc-right");
          item.mark.append(verdict("ok", "Correct:", "it goes in " + item.bucket + "."));
        } else {
          item.li.classList.add("sc-wrong");
          item.mark.append(verdict("no", "Not quite:", "it goes in " + item.bucket + ", not " + chosen + "."));
          if (item.note) item.mark.append(copyOf(item.note));
        }
      });
      if (!state.checked) return;
      if (right === items.length) {
        feedback.append(verdict("ok", "Correct.", "All " + items.length + " items are in the right bucket."));
        if (explanation) feedback.append(copyOf(explanation));
      } else {
        feedback.append(verdict("no", "Not quite.", right + " of " + items.length + " items are in the right bucket."));
      }
      if (moveFocus) feedback.focus();
    }
    var widget = track(ctx, {
      blank: function () { return { assigned: {}, checked: false }; },
      render: render,
      checkForm: form,
      resetButton: reset,
      focusAfterReset: function () { return items[0].inputs[0]; },
    });
    form.addEventListener("change", function () {
      var assigned = {};
      items.forEach(function (item) {
        item.inputs.forEach(function (input) { if (input.checked) assigned[item.key] = input.value; });
      });
      widget.set({ assigned: assigned, checked: false }, false);
    });
    return widget;
  }

  /** A row's words for a screen reader: a table row's cells, each after its column's name. */
  function rowText(row) {
    var cells = row.querySelectorAll("td, th");
    if (!cells.length) return textOf(row);
    var table = row.closest("table");
    var heads = table ? table.querySelectorAll("thead th") : [];
    return Array.prototype.map.call(cells, function (cell, i) {
      var head = heads[i] ? textOf(heads[i]) : "";
      return (head ? head + ": " : "") + textOf(cell);
    }).join("; ") + ".";
  }

  function setupSteps(root, ctx) {
    var rows = Array.prototype.slice.call(
      root.querySelectorAll(".sc-rows > .sc-row, table.sc-rows-table > tbody > tr"));
    var next = root.querySelector(".sc-next");
    var details = next.querySelector(".sc-answer");
    var answerBody = details.querySelector(".sc-answer-body");
    // The closing question, and the label of the box it is answered in (":answer-label:").
    var nextQuestion = textOf(next.querySelector(".sc-next-question")).replace(/^Next:\s*/, "") ||
      "What would the next row be?";
    var answerLabel = root.dataset.scAnswerLabel || "Your next row";
    details.hidden = true;
    next.setAttribute("tabindex", "-1"); // focus comes here once every row is out

    var more = button("Show the next row", { class: "sc-button sc-primary" });
    var reset = resetButton("step-through");
    var progress = make("div", { class: "sc-feedback sc-progress", "aria-live": "polite" });
    next.before(make("div", { class: "sc-actions" }, more, reset), progress);
    var commit = commitPanel(ctx, "next-row", answerLabel, "Reveal the answer");
    var feedback = feedbackBox();
    details.before(commit.panel, make("div", { class: "sc-actions" }, commit.reveal), feedback);

    function render(state, focus) {
      var shown = Math.max(1, Math.min(state.shown, rows.length));
      rows.forEach(function (row, index) { row.hidden = index >= shown; });
      var finished = shown >= rows.length;
      more.hidden = finished;
      // The closing question shows right below once every row is out; a screen reader
      // hears it with the progress, where the eye would read it twice. So with the new
      // row: focus stays on the button, and the row is read out from here.
      progress.replaceChildren("Row " + shown + " of " + rows.length + " shown.");
      var spoken = focus === "row" ? " " + rowText(rows[shown - 1]) : "";
      if (finished) spoken += " Now: " + nextQuestion;
      if (spoken) progress.append(make("span", { class: "sc-visually-hidden" }, spoken));
      next.hidden = !finished;
      var revealed = state.committed !== null;
      commit.box.value = state.draft;
      commit.panel.hidden = revealed;
      commit.reveal.hidden = revealed;
      commit.reveal.disabled = !state.draft.trim();
      feedback.replaceChildren();
      if (revealed) feedback.append(comparison(state.committed, answerBody, answerLabel));
      // The button keeps focus for the next press; after the last row it is gone, and
      // focus goes to the closing question (not the answer box: that would open a
      // phone's keyboard unasked).
      if (focus === "row" && finished) next.focus();
      else if (focus && focus !== "row") feedback.focus();
    }
    var widget = track(ctx, {
      blank: function () { return { shown: 1, draft: "", committed: null }; },
      render: render,
      resetButton: reset,
      focusAfterReset: function () { return more; },
    });
    more.addEventListener("click", function () {
      var shown = Math.min(widget.state.shown + 1, rows.length);
      widget.set(Object.assign({}, widget.state, { shown: shown }), "row");
    });
    wireCommit(commit, widget);
    return widget;
  }

  /** Let a long header break after its underscores ("scaled_loss"), so a column to fill
   * can be narrow on a phone. */
  function breakAfterUnderscores(cell) {
    var walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    var texts = [];
    while (walker.nextNode()) texts.push(walker.currentNode);
    texts.forEach(function (node) {
      if (node.data.indexOf("_") === -1) return;
      var parts = node.data.split("_");
      var pieces = document.createDocumentFragment();
      parts.forEach(function (part, i) {
        pieces.append(part + (i < parts.length - 1 ? "_" : ""));
        if (i < parts.length - 1 && parts[i + 1]) pieces.append(make("wbr"));
      });
      node.replaceWith(pieces);
    });
  }

  /**
   * A table wider than its box scrolls sideways inside it. The box is a named region a
   * keyboard can focus (and scroll with the arrow keys) while it scrolls; a shadow
   * darkens each edge that has more table beyond it, and a line under the table says
   * which way the rest lies. Returns the frame to put in the page.
   */
  function scrollCue(container, name) {
    container.classList.add("sc-scroll");
    container.setAttribute("role", "region");
    container.setAttribute("aria-label", name);
    var frame = make("div", { class: "sc-scroll-frame" });
    var hint = make("p", { class: "sc-scroll-hint", hidden: true });
    function update() {
      var room = container.scrollWidth - container.clientWidth;
      var left = container.scrollLeft > 1;
      var right = container.scrollLeft < room - 1;
      frame.classList.toggle("sc-more-left", room > 1 && left);
      frame.classList.toggle("sc-more-right", room > 1 && right);
      container.tabIndex = room > 1 ? 0 : -1;
      hint.hidden = !(room > 1);
      hint.textContent = right
        ? "More columns to the right \u2192 (scroll the table sideways)"
        : "\u2190 More columns to the left (scroll the table back)";
    }
    container.addEventListener("scroll", update, { passive: true });
    window.addEventListener("resize", update);
    if (window.ResizeObserver) new ResizeObserver(update).observe(container);
    return { frame: frame, hint: hint, update: update };
  }

  /* A refill table is checked in two steps: Check says Match or Differs for
   * each cell, and why a cell differs, and shows no answer, so a reader can try
   * the cells that differ again; only "Show the true values", a second and
   * deliberate action, puts the true value beside each cell. (Without
   * JavaScript each cell's value sits in its own <details>.) */
  function setupRefill(root, ctx) {
    var tolerance = parseFloat(root.dataset.scTolerance);
    if (!(tolerance >= 0)) tolerance = DEFAULT_TOLERANCE;
    var table = root.querySelector("table.sc-refill-table");
    var container = table.closest(".pst-scrollable-table-container");
    if (!container) {
      container = make("div", { class: "pst-scrollable-table-container" });
      table.replaceWith(container);
      container.append(table);
    }
    var form = make("form", { class: "sc-form", novalidate: true });
    container.replaceWith(form);
    var check = button("Check", { type: "submit", class: "sc-button sc-primary" });
    var reveal = button("Show the true values", { class: "sc-button sc-reveal", hidden: true });
    var reset = resetButton("table");
    var feedback = feedbackBox();
    var filled = Array.prototype.map.call(table.querySelectorAll("thead th.sc-refill-header"), textOf);
    table.querySelectorAll("thead th").forEach(breakAfterUnderscores);
    var cue = scrollCue(container, "Table to fill in" + (filled.length ? ": " + filled.join(", ") : ""));
    cue.frame.append(container);
    var instructions = make("p", { class: "sc-instructions" }, "Fill in the empty cells from memory, then check.");
    form.append(instructions, cue.frame, cue.hint, make("div", { class: "sc-actions" }, check, reveal, reset), feedback);

    var cells = Array.prototype.map.call(root.querySelectorAll(".sc-refill-slot"), function (slot, index) {
      var truth = slot.querySelector(".sc-truth");
      slot.querySelector("details").hidden = true;
      var input = make("input", {
        type: "text", class: "sc-text sc-refill-input", autocomplete: "off", spellcheck: "false",
        "aria-label": slot.dataset.scLabel || "value",
      });
      var result = make("div", { class: "sc-cell-result", hidden: true });
      slot.append(input, result);
      return {
        index: String(index), input: input, result: result, truth: truth, slot: slot,
        expected: truthOf(textOf(truth), tolerance),
      };
    });
    instructions.append(comparingRule(cells.map(function (cell) { return cell.expected; })));

    function render(state, moveFocus) {
      var right = 0;
      cells.forEach(function (cell) {
        var given = state.values[cell.index] || "";
        cell.input.value = given;
        cell.slot.classList.remove("sc-right", "sc-wrong", "sc-blank");
        cell.result.replaceChildren();
        cell.result.hidden = !state.checked;
        if (!state.checked) return;
        var judged = judgeCell(given, cell.expected, state.revealed);
        if (judged.ok) right += 1;
        // A blank cell is not a wrong answer: it gets no tint, only the word "Blank".
        var blank = !given.trim();
        cell.slot.classList.add(judged.ok ? "sc-right" : blank ? "sc-blank" : "sc-wrong");
        cell.result.append(
          verdict(judged.ok ? "ok" : blank ? "none" : "no", judged.ok ? "Match" : blank ? "Blank" : "Differs"));
        if (judged.why) cell.result.append(make("span", { class: "sc-why" }, judged.why));
        if (state.revealed) {
          var truth = make("span", { class: "sc-true-value" }, "true: ");
          truth.append(copyOf(cell.truth));
          cell.result.append(truth);
        }
      });
      var allRight = right === cells.length;
      reveal.hidden = !state.checked || state.revealed || allRight;
      feedback.replaceChildren();
      cue.update();
      if (!state.checked) return;
      if (allRight) {
        feedback.append(verdict("ok", "Correct.", "All " + cells.length + " cells match."));
      } else if (state.revealed) {
        feedback.append(verdict("no", "Not quite.", right + " of " + cells.length +
          " cells match; the true value is beside each cell."));
      } else {
        feedback.append(verdict("no", "Not quite.", right + " of " + cells.length +
          " cells match. Try the others again, or show the true values."));
      }
      if (moveFocus) feedback.focus();
    }
    var widget = track(ctx, {
      blank: function () { return { values: {}, checked: false, revealed: false }; },
      render: render,
      checkForm: form,
      resetButton: reset,
      focusAfterReset: function () { return cells.length ? cells[0].input : null; },
    });
    form.addEventListener("input", function () {
      var values = {};
      cells.forEach(function (cell) { if (cell.input.value) values[cell.index] = cell.input.value; });
      var next = { values: values, checked: false, revealed: false };
      // Redraw only when there was a verdict to clear: a redraw while typing is not needed.
      if (widget.state.checked) widget.set(next, false);
      else widget.keep(next);
    });
    reveal.addEventListener("click", function () {
      widget.set(Object.assign({}, widget.state, { revealed: true }), true);
    });
    return widget;
  }

  function setupDiscuss(root, ctx) {
    var boxId = "sc-" + ctx.id + "-notes";
    var box = make("textarea", { id: boxId, class: "sc-text", rows: "4" });
    var reset = resetButton("answer");
    var panel = make("div", { class: "sc-commit" },
      make("label", { for: boxId }, "Your answer (kept in this browser)"), box);
    var hint = root.querySelector(".sc-hint");
    var actions = make("div", { class: "sc-actions" }, reset);
    if (hint) hint.before(panel, actions);
    else root.append(panel, actions);
    var widget = track(ctx, {
      blank: function () { return { draft: "" }; },
      render: function (state) { box.value = state.draft; },
      resetButton: reset,
      focusAfterReset: function () { return box; },
    });
    box.addEventListener("input", function () { widget.keep({ draft: box.value }); });
    return widget;
  }

  var SETUP = {
    choice: setupChoice,
    predict: setupPredict,
    sort: setupSort,
    steps: setupSteps,
    refill: setupRefill,
    discuss: setupDiscuss,
  };

  /* ------------------------------------------------------------------ page */

  function pageBar(controllers) {
    var status = make("p", { class: "sc-page-status", "aria-live": "polite" });
    var clearAll = button("Reset my answers", { class: "sc-button sc-reset-page" });
    var note = storage.available
      ? "Your answers on this page are kept in this browser only."
      : "This browser is not keeping answers (its storage is blocked): they last until you leave the page.";
    clearAll.addEventListener("click", function () {
      controllers.forEach(function (controller) { controller.reset(); });
      storage.keysWithPrefix(PAGE_PREFIX).forEach(storage.remove);
      status.textContent = "Your answers on this page have been cleared.";
    });
    return make("div", { class: "sc-page-bar", role: "region", "aria-label": "Your answers" },
      make("p", { class: "sc-page-note" }, note), clearAll, status);
  }

  function init() {
    var roots = document.querySelectorAll(".sc[data-sc-kind]");
    var controllers = [];
    roots.forEach(function (root) {
      var setup = SETUP[root.dataset.scKind];
      if (!setup || root.classList.contains("sc-live")) return;
      var key = PAGE_PREFIX + root.dataset.scId;
      var ctx = {
        id: root.dataset.scId,
        load: function () { return storage.read(key); },
        save: function (state) { storage.write(key, state); },
        clear: function () { storage.remove(key); },
      };
      try {
        controllers.push(setup(root, ctx));
        root.classList.add("sc-live");
      } catch (error) {
        /* The static version stays usable; say why in the console for authors. */
        console.warn("selfcheck: could not set up " + ctx.id + ":", error);
      }
    });
    if (controllers.length) roots[0].before(pageBar(controllers));
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
