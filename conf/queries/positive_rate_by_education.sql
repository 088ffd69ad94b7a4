-- Predicted vs actual share of incomes above 50K, per education level.
-- `features` is the people table joined with regions and activity, as in training;
-- predict_income(struct(*)) picks the model's inputs out of the row by name.
SELECT education,
       count(*)                                                   AS people,
       round(avg(CASE WHEN income = '>50K' THEN 1.0 ELSE 0.0 END), 4) AS actual_positive_rate,
       round(avg(p.probability), 4)                                AS predicted_positive_rate
FROM (SELECT *, predict_income(struct(*)) AS p FROM features)
GROUP BY education
ORDER BY predicted_positive_rate DESC;
