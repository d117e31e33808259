// sluice console: refresh every element with data-refresh from its URL (server-rendered HTML).
// An element with data-until-final stops once its table says data-final="yes".
"use strict";
(function () {
  function refresh(el) {
    fetch(el.dataset.refresh, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null) { el.innerHTML = html; }
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
