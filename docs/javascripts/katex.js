// Typeset the formulas of every page (pymdownx.arithmatex writes them as \( … \) and \[ … \]); Material's
// instant navigation swaps pages without a reload, so this runs on each page it shows.
document$.subscribe(({ body }) => {
  renderMathInElement(body, {
    delimiters: [
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
    throwOnError: false,
  });
});
