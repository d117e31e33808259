// sluice console: refresh every element with data-refresh from its URL (server-rendered HTML).
// An element with data-until-final stops once its table says data-final="yes".
// A refresh never replaces a form someone is filling in: while an input inside the element has
// focus or holds an edited value, the element is left alone and asked again next round.
"use strict";
(function () {
  function editing(el) {
    var active = document.activeElement;
    if (active && el.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) { return true; }
    return Array.prototype.some.call(el.querySelectorAll("input"), function (input) {
      return input.type !== "hidden" && input.value !== input.defaultValue;
    });
  }
  function refresh(el) {
    fetch(el.dataset.refresh, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null && !editing(el)) { el.innerHTML = html; }
        var done = el.dataset.untilFinal && el.querySelector('[data-final="yes"]');
        if (!done) { setTimeout(function () { refresh(el); }, 2000); }
      })
      .catch(function () { setTimeout(function () { refresh(el); }, 5000); });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-refresh]").forEach(function (el) {
      setTimeout(function () { refresh(el); }, 2000);
    });
  });
})();
