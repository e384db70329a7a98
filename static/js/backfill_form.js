// The backfill form's "by ids / by time" switch: shows the chosen pair of inputs, and offers
// "by time" only while the live preview says the job's source records item times
// (#time-basis, swapped in by each preview).
(function () {
  const form = document.getElementById("backfill-form");
  if (!form) return;

  function apply() {
    const basis = document.getElementById("time-basis");
    const byTime = document.getElementById("by-time");
    const supported = basis && basis.dataset.supported === "1";
    byTime.disabled = !supported;
    if (!supported && byTime.checked) {
      document.getElementById("by-ids").checked = true;
    }
    const chosen = form.querySelector("input[name=by]:checked");
    const mode = chosen ? chosen.value : "ids";
    form.querySelectorAll("[data-by]").forEach(function (group) {
      // not the hidden attribute: the stylesheet's display: grid would override it
      group.style.display = group.dataset.by === mode ? "" : "none";
    });
  }

  form.addEventListener("change", function (event) {
    if (event.target.name === "by") apply();
  });
  document.body.addEventListener("htmx:afterSettle", apply);
  apply();
})();
