-- The windows the autoencoder reconstructs worst, per asset.
-- `windows` has one row per window of the sensor files, cut as in training (sensors as
-- arrays); score_sensors(struct(*)) returns latent, reconstruction_error and is_anomaly.
SELECT asset_id, window_start, round(s.reconstruction_error, 4) AS reconstruction_error, s.is_anomaly
FROM (SELECT asset_id, window_start, score_sensors(struct(*)) AS s FROM windows)
ORDER BY s.reconstruction_error DESC
LIMIT 10;
