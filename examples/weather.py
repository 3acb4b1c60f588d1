# /// script
# dependencies = ["httpx"]
# ///
"""The weather tool of TBD Agents' custom-tool docs, unchanged: it calls Open-Meteo
with httpx. Run it with the host granted:

    warden run examples/weather.py --allow-host api.open-meteo.com \
      --args '{"latitude": 52.52, "longitude": 13.41}'
"""

import httpx


def get_weather(latitude: float, longitude: float) -> dict:
    """Get the current temperature and wind speed at a location.

    Args:
        latitude: Latitude of the location, in degrees.
        longitude: Longitude of the location, in degrees.
    """
    response = httpx.get(
        "https://api.open-meteo.com/v1/forecast",
        params={
            "latitude": latitude,
            "longitude": longitude,
            "current": "temperature_2m,wind_speed_10m",
        },
    )
    response.raise_for_status()
    return response.json()["current"]
