// The job page's watermark chart: committed position over time, from the page's JSON data.
(function () {
  const data = JSON.parse(document.getElementById("history-data").textContent || "[]");
  const canvas = document.getElementById("history");
  if (!canvas || !data.length || typeof Chart === "undefined") return;
  new Chart(canvas, {
    type: "line",
    data: {
      labels: data.map((p) => p.at),
      datasets: [{ label: "next item id (committed prefix)", data: data.map((p) => p.position),
                   stepped: true, pointRadius: 2 }],
    },
    options: { animation: false, scales: { x: { ticks: { maxTicksLimit: 8 } } } },
  });
})();
