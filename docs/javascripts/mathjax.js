// MathJax 3 configuration for pymdownx.arithmatex (generic mode): \( ... \) inline, \[ ... \] display.
// MathJax itself is served from the built site (docs/hooks/site.py copies it there).
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};
